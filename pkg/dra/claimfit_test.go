package dra

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/pkg/dra/prepared"
)

// TestPrepareRefusesClaimBeyondGPU: one claim may not hold a GPU whole and
// another device of it, nor fractions of one GPU past its memory or cores.
// The refusal names the claim, the GPU, the requests and the numbers, and
// prepare loses nothing: the checkpoint file, the CDI dir and the claims
// prepared before are as they were, and a good claim in the same call is
// prepared.
func TestPrepareRefusesClaimBeyondGPU(t *testing.T) {
	mig := &fakeMIG{}
	e := newPrepEnv(t, "dgx-h100", mig)
	p := e.preparer()
	gpu0 := e.tab.pub.Devices["gpu-0"]
	mem := func(v string) map[resourceapi.QualifiedName]string {
		return map[resourceapi.QualifiedName]string{"memory": v}
	}
	cores := func(v string) map[resourceapi.QualifiedName]string {
		return map[resourceapi.QualifiedName]string{"memory": "1Gi", "cores": v}
	}
	// Claims prepared before the refused ones, which must survive them.
	if _, err := prepareOne(t, p, claim("before", "before", alloc{pool: e.name, device: "gpu-7"})); err != nil {
		t.Fatal(err)
	}
	if _, err := prepareOne(t, p, claim("before-frac", "before-frac", alloc{pool: e.name, device: "gpu-0", shareID: "s-x", capacity: mem("4Gi")})); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  []string // in the error
	}{
		{
			name: "two fractions of 60 GiB on an 80 GiB GPU",
			claim: claim("two60", "two60",
				alloc{request: "a", pool: e.name, device: "gpu-0", shareID: "s-1", capacity: mem("60Gi")},
				alloc{request: "b", pool: e.name, device: "gpu-0", shareID: "s-2", capacity: mem("60Gi")}),
			want: []string{"claim ns/two60", `"gpu-0"`, gpu0.GPUUUID, `"a", "b"`, "120 GiB (128849018880 bytes)", gib(gpu0.MemoryBytes)},
		},
		{
			name: "three fractions past the GPU",
			claim: claim("three", "three",
				alloc{request: "a", pool: e.name, device: "gpu-1", shareID: "s-1", capacity: mem("30Gi")},
				alloc{request: "b", pool: e.name, device: "gpu-1", shareID: "s-2", capacity: mem("30Gi")},
				alloc{request: "c", pool: e.name, device: "gpu-1", shareID: "s-3", capacity: mem("30Gi")}),
			want: []string{`"gpu-1"`, `"a", "b", "c"`, "90 GiB"},
		},
		{
			name: "whole GPU and a fraction of it",
			claim: claim("wholefrac", "wholefrac",
				alloc{request: "whole", pool: e.name, device: "gpu-2"},
				alloc{request: "part", pool: e.name, device: "gpu-2", shareID: "s-1", capacity: mem("10Gi")}),
			want: []string{"claim ns/wholefrac", `"gpu-2"`, `request "whole"`, `"part"`},
		},
		{
			name: "whole GPU twice through two shares",
			claim: claim("wholetwice", "wholetwice",
				alloc{request: "a", pool: e.name, device: "gpu-3", shareID: "s-1"},
				alloc{request: "b", pool: e.name, device: "gpu-3", shareID: "s-2"}),
			want: []string{`"gpu-3"`, `request "a"`, `"b"`},
		},
		{
			name: "whole GPU and a MIG slice of it",
			claim: claim("wholemig", "wholemig",
				alloc{request: "whole", pool: e.name, device: "gpu-4"},
				alloc{request: "slice", pool: e.name, device: "gpu-4-mig-1g10gb-0"}),
			want: []string{`"gpu-4"`, `request "whole"`, `"slice"`},
		},
		{
			name: "fractions past the GPU's cores",
			claim: claim("cores", "cores",
				alloc{request: "a", pool: e.name, device: "gpu-5", shareID: "s-1", capacity: cores("60")},
				alloc{request: "b", pool: e.name, device: "gpu-5", shareID: "s-2", capacity: cores("60")}),
			want: []string{`"gpu-5"`, "120%"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cpBefore, err := os.ReadFile(prepared.Path(e.stateDir))
			if err != nil {
				t.Fatal(err)
			}
			cdiBefore := dirNames(t, e.cdiDir)
			preparedBefore := p.Prepared()

			good := claim("good-"+string(tc.claim.UID), "good", alloc{pool: e.name, device: "gpu-6", shareID: "s-" + string(tc.claim.UID), capacity: mem("1Gi")})
			res, err := p.Prepare(t.Context(), []*resourceapi.ResourceClaim{tc.claim, good})
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			got := res[tc.claim.UID]
			if !errors.Is(got.Err, ErrClaimExceedsGPU) || len(got.Devices) != 0 {
				t.Fatalf("prepare = %+v, %v; want ErrClaimExceedsGPU", got.Devices, got.Err)
			}
			for _, w := range tc.want {
				if !strings.Contains(got.Err.Error(), w) {
					t.Errorf("error %q does not name %s", got.Err, w)
				}
			}
			if res[good.UID].Err != nil {
				t.Errorf("a good claim in the same call: %v", res[good.UID].Err)
			}
			if err := unprepareOne(t, p, string(good.UID)); err != nil {
				t.Fatal(err)
			}

			cpAfter, err := os.ReadFile(prepared.Path(e.stateDir))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(cpBefore, cpAfter) {
				t.Errorf("checkpoint changed:\nbefore %s\nafter  %s", cpBefore, cpAfter)
			}
			if after := dirNames(t, e.cdiDir); !reflect.DeepEqual(cdiBefore, after) {
				t.Errorf("CDI dir %v, was %v", after, cdiBefore)
			}
			if after := p.Prepared(); !reflect.DeepEqual(after, preparedBefore) {
				t.Errorf("prepared claims %v, were %v", keysOf(after), keysOf(preparedBefore))
			}
			if after := e.preparer().Prepared(); !reflect.DeepEqual(after, preparedBefore) {
				t.Errorf("after a restart, prepared claims %v, were %v", keysOf(after), keysOf(preparedBefore))
			}
			if n := mig.liveCount(); n != 0 {
				t.Errorf("%d MIG devices created for a refused claim", n)
			}
		})
	}
}

// TestPrepareClaimWithinGPU: what fits in one GPU is prepared, up to all
// of its memory, and fractions on different GPUs are checked per GPU.
func TestPrepareClaimWithinGPU(t *testing.T) {
	e := newPrepEnv(t, "dgx-h100", &fakeMIG{})
	full := e.tab.pub.Devices["gpu-0"].MemoryBytes
	half := itoa(int(full / 2))
	rest := itoa(int(full - full/2))
	c := claim("fits", "fits",
		alloc{request: "a", pool: e.name, device: "gpu-0", shareID: "s-1", capacity: map[resourceapi.QualifiedName]string{"memory": half, "cores": "50"}},
		alloc{request: "b", pool: e.name, device: "gpu-0", shareID: "s-2", capacity: map[resourceapi.QualifiedName]string{"memory": rest, "cores": "50"}},
		alloc{request: "c", pool: e.name, device: "gpu-1", shareID: "s-3", capacity: map[resourceapi.QualifiedName]string{"memory": "60Gi"}},
		alloc{request: "d", pool: e.name, device: "gpu-2", shareID: "s-4", capacity: map[resourceapi.QualifiedName]string{"memory": "60Gi"}},
		alloc{request: "e", pool: e.name, device: "gpu-3"},
		alloc{request: "f", pool: e.name, device: "gpu-4-mig-1g10gb-0"},
		alloc{request: "g", pool: e.name, device: "gpu-4-mig-1g10gb-1"})
	devs, err := prepareOne(t, e.preparer(), c)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if len(devs) != 7 {
		t.Errorf("%d devices prepared, want 7", len(devs))
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func keysOf(m map[types.UID]PreparedClaim) []types.UID {
	out := make([]types.UID, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
