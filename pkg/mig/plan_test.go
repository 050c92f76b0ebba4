package mig

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gpud/gpud/pkg/simnode"
)

var (
	a100Once  sync.Once
	a100State State
)

// a100 returns the state of an untouched dgx-a100 (MIG off), read once.
func a100(t testing.TB) State {
	a100Once.Do(func() { a100State = mustState(t, simnode.NewBuiltin("dgx-a100")) })
	st := a100State
	st.GPUs = slices.Clone(st.GPUs)
	return st
}

// withInstances sets GPU i to MIG on with the given "profile@start"
// instances; a trailing "!" leaves the instance without its compute
// instance. UUIDs are "MIG-<gpu>-<start>".
func withInstances(st State, i int, specs ...string) State {
	g := &st.GPUs[i]
	g.MIGEnabled, g.PendingEnabled = true, true
	g.Instances = nil
	for k, s := range specs {
		incomplete := strings.HasSuffix(s, "!")
		prof, start, _ := strings.Cut(strings.TrimSuffix(s, "!"), "@")
		p, err := g.Catalog.Lookup(prof)
		if err != nil {
			panic(err)
		}
		var at Placement
		for _, pl := range p.Placements {
			if strconv.Itoa(pl.Start) == start {
				at = pl
			}
		}
		in := Instance{GIID: k + 1, Profile: p.Name, Placement: at}
		if !incomplete {
			in.CIs = []ComputeInstance{{ID: 0, Full: true, UUID: uuidAt(i, at.Start)}}
		}
		g.Instances = append(g.Instances, in)
	}
	return st
}

func uuidAt(gpu, start int) string { return fmt.Sprintf("MIG-%d-%d", gpu, start) }

func all1g(st State) State {
	for i := range st.GPUs {
		st = withInstances(st, i, "1g.5gb@0", "1g.5gb@1", "1g.5gb@2", "1g.5gb@3", "1g.5gb@4", "1g.5gb@5", "1g.5gb@6")
	}
	return st
}

func want(gpu int, enabled bool, slices ...string) Desired {
	w := GPUWants{MIGEnabled: enabled}
	for _, s := range slices {
		prof, start, pinned := strings.Cut(s, "@")
		at := -1
		if pinned {
			at, _ = strconv.Atoi(start)
		}
		w.Slices = append(w.Slices, Want{Profile: prof, Start: at})
	}
	return Desired{Config: "test", GPUs: map[int]GPUWants{gpu: w}}
}

func stepStrings(p Plan) []string {
	var out []string
	for _, s := range p.Steps() {
		out = append(out, s.String())
	}
	return out
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name      string
		state     func(State) State
		want      Desired
		busy      Busy
		force     bool
		wantSteps []string
		wantKeep  []string // on the one changed GPU
		wantErr   error
		errHas    []string
		errHasNot []string
		pending   bool
	}{
		{
			name:  "matching GPU untouched",
			state: all1g,
			want:  want(0, true, "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"),
		},
		{
			name:      "keep shared slices",
			state:     all1g,
			want:      want(0, true, "1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"),
			wantKeep:  []string{"1g.5gb@0", "1g.5gb@1"},
			wantSteps: []string{"gpu 0: destroy 1g.5gb at 2-2 (gi 3)", "gpu 0: destroy 1g.5gb at 3-3 (gi 4)", "gpu 0: destroy 1g.5gb at 4-4 (gi 5)", "gpu 0: destroy 1g.5gb at 5-5 (gi 6)", "gpu 0: destroy 1g.5gb at 6-6 (gi 7)", "gpu 0: create 2g.10gb at 2-3", "gpu 0: create 3g.20gb at 4-7"},
		},
		{
			name:      "keep prefers busy slices",
			state:     all1g,
			want:      want(0, true, "1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"),
			busy:      Busy{uuidAt(0, 2): {"ns/a"}, uuidAt(0, 3): {"ns/b"}},
			wantKeep:  []string{"1g.5gb@2", "1g.5gb@3"},
			wantSteps: []string{"gpu 0: destroy 1g.5gb at 0-0 (gi 1)", "gpu 0: destroy 1g.5gb at 1-1 (gi 2)", "gpu 0: destroy 1g.5gb at 4-4 (gi 5)", "gpu 0: destroy 1g.5gb at 5-5 (gi 6)", "gpu 0: destroy 1g.5gb at 6-6 (gi 7)", "gpu 0: create 2g.10gb at 0-1", "gpu 0: create 3g.20gb at 4-7"},
		},
		{
			name:      "placement conflict moves an idle slice",
			state:     func(st State) State { return withInstances(st, 0, "1g.5gb@2") },
			want:      want(0, true, "4g.20gb", "1g.5gb"),
			wantSteps: []string{"gpu 0: destroy 1g.5gb at 2-2 (gi 1)", "gpu 0: create 4g.20gb at 0-3", "gpu 0: create 1g.5gb at 4-4"},
		},
		{
			name:    "placement conflict around a busy slice",
			state:   func(st State) State { return withInstances(st, 0, "1g.5gb@2") },
			want:    want(0, true, "4g.20gb", "1g.5gb"),
			busy:    Busy{uuidAt(0, 2): {"team/train-0"}},
			wantErr: ErrNoFit,
			errHas:  []string{"gpu 0", "4g.20gb", "1g.5gb@2 (busy: team/train-0)", "--force"},
		},
		{
			name:    "placement conflict with no way to fit",
			state:   func(st State) State { return st },
			want:    want(0, true, "3g.20gb", "3g.20gb", "1g.5gb"),
			wantErr: ErrNoFit,
			errHas:  []string{"gpu 0", "3g.20gb + 3g.20gb + 1g.5gb"},
		},
		{
			name:    "too many compute slices",
			state:   func(st State) State { return st },
			want:    want(0, true, "4g.20gb", "2g.10gb", "2g.10gb"),
			wantErr: ErrNoFit,
			errHas:  []string{"8 compute slices asked, the GPU has 7", "fewer or smaller profiles"},
			// Nothing runs on the GPU: no slice to free, nothing to force.
			errHasNot: []string{"--force", "free those slices"},
		},
		{
			name:      "more of one profile than a GPU holds",
			state:     func(st State) State { return st },
			want:      want(0, true, "4g.20gb", "4g.20gb"),
			wantErr:   ErrNoFit,
			errHas:    []string{"at most 1 x 4g.20gb per GPU", "fewer or smaller profiles"},
			errHasNot: []string{"--force", "free those slices"},
		},
		{
			name:    "refuse busy",
			state:   all1g,
			want:    want(0, true, "3g.20gb", "3g.20gb"),
			busy:    Busy{uuidAt(0, 5): {"ml/infer-7", "pid 4242"}},
			wantErr: ErrBusy,
			errHas:  []string{"gpu 0 1g.5gb MIG-0-5 held by ml/infer-7, pid 4242", "--force"},
		},
		{
			name:    "refuse disabling MIG under a busy slice",
			state:   all1g,
			want:    want(0, false),
			busy:    Busy{uuidAt(0, 0): {"ml/infer-1"}},
			wantErr: ErrBusy,
			errHas:  []string{"ml/infer-1"},
		},
		{
			name:    "refuse enabling MIG on a busy whole GPU",
			state:   func(st State) State { return st },
			want:    want(0, true, "7g.40gb"),
			busy:    Busy{"": nil}, // replaced below with the GPU's UUID
			wantErr: ErrBusy,
			errHas:  []string{"whole GPU", "ml/full-gpu"},
		},
		{
			name:  "forced",
			state: all1g,
			want:  want(0, true, "3g.20gb", "3g.20gb"),
			busy:  Busy{uuidAt(0, 5): {"ml/infer-7"}},
			force: true,
			wantSteps: []string{"gpu 0: destroy 1g.5gb at 0-0 (gi 1)", "gpu 0: destroy 1g.5gb at 1-1 (gi 2)", "gpu 0: destroy 1g.5gb at 2-2 (gi 3)", "gpu 0: destroy 1g.5gb at 3-3 (gi 4)",
				"gpu 0: destroy 1g.5gb at 4-4 (gi 5)", "gpu 0: destroy 1g.5gb at 5-5 (gi 6) FORCED, held by ml/infer-7", "gpu 0: destroy 1g.5gb at 6-6 (gi 7)",
				"gpu 0: create 3g.20gb at 0-3", "gpu 0: create 3g.20gb at 4-7"},
		},
		{
			name: "mode change pending",
			state: func(st State) State {
				st.GPUs[0].PendingEnabled = true
				return st
			},
			want:    want(0, true, "1g.5gb"),
			pending: true,
		},
		{
			name: "pending mode change cancelled",
			state: func(st State) State {
				st.GPUs[0].PendingEnabled = true
				return st
			},
			want:      want(0, false),
			wantSteps: []string{"gpu 0: disable MIG mode"},
		},
		{
			name:      "enable from disabled",
			state:     func(st State) State { return st },
			want:      want(0, true, "4g.20gb", "3g.20gb"),
			wantSteps: []string{"gpu 0: enable MIG mode", "gpu 0: create 4g.20gb at 0-3", "gpu 0: create 3g.20gb at 4-7"},
		},
		{
			name:      "pinned placement",
			state:     func(st State) State { return withInstances(st, 0, "3g.20gb@0", "3g.20gb@4") },
			want:      want(0, true, "3g.20gb@4", "1g.5gb@0"),
			wantKeep:  []string{"3g.20gb@4"},
			wantSteps: []string{"gpu 0: destroy 3g.20gb at 0-3 (gi 1)", "gpu 0: create 1g.5gb at 0-0"},
		},
		{
			name:      "incomplete instance completed",
			state:     func(st State) State { return withInstances(st, 0, "3g.20gb@0!", "3g.20gb@4") },
			want:      want(0, true, "3g.20gb", "3g.20gb"),
			wantKeep:  []string{"3g.20gb@0", "3g.20gb@4"},
			wantSteps: []string{"gpu 0: complete 3g.20gb at 0-3 (gi 1): create its compute instance"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.state(a100(t))
			busy := tc.busy
			if _, ok := busy[""]; ok {
				busy = Busy{st.GPUs[0].UUID: {"ml/full-gpu"}}
			}
			p, err := NewPlan(st, tc.want, busy, Options{Force: tc.force})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("NewPlan() error = %v, want %v", err, tc.wantErr)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				for _, s := range tc.errHasNot {
					if strings.Contains(err.Error(), s) {
						t.Errorf("error %q mentions %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("NewPlan() error = %v", err)
			}
			if got := stepStrings(p); !slices.Equal(got, tc.wantSteps) {
				t.Errorf("steps:\n got %q\nwant %q", got, tc.wantSteps)
			}
			if tc.pending != (len(p.GPUs) == 1 && p.GPUs[0].Pending != "") {
				t.Errorf("pending = %+v, want pending %v", p.GPUs, tc.pending)
			}
			if len(tc.wantSteps) == 0 && !tc.pending && !slices.Equal(p.Unchanged, []int{0}) {
				t.Errorf("Unchanged = %v, want [0]", p.Unchanged)
			}
			if tc.wantKeep != nil {
				if got := layoutString(GPUState{Instances: p.GPUs[0].Keep}); !slices.Equal(got, tc.wantKeep) {
					t.Errorf("keep = %v, want %v", got, tc.wantKeep)
				}
			}
		})
	}
}

func TestPlanIsIncrementalAcrossGPUs(t *testing.T) {
	st := all1g(a100(t))
	f := mustLayouts(t)
	_, p := mustPlan(t, f, "mixed", st)
	var changed []int
	for _, g := range p.GPUs {
		changed = append(changed, g.GPU)
		if len(g.Keep) != 2 {
			t.Errorf("gpu %d keeps %d slices, want the 2 1g.5gb both layouts share", g.GPU, len(g.Keep))
		}
	}
	if !slices.Equal(changed, []int{0, 1, 2, 3}) || !slices.Equal(p.Unchanged, []int{4, 5, 6, 7}) {
		t.Errorf("changed %v, unchanged %v; want 0-3 changed and 4-7 untouched", changed, p.Unchanged)
	}
}

// BenchmarkPlan measures planning a node-wide change on 8 A100s, where
// every GPU needs the keep search and the placement backtracking.
func BenchmarkPlan(b *testing.B) {
	st := all1g(a100(b))
	want, err := mustLayouts(b).Resolve("mixed", st)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewPlan(st, want, nil, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
