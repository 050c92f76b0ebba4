package topology

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/gpu"
)

// pcieNode builds n GPUs, perSwitch to a PCIe switch, switches split over two
// NUMA nodes: PIX inside a switch, NODE within a socket, SYS across.
func pcieNode(n, perSwitch int) gpu.Inventory {
	var inv gpu.Inventory
	for i := range n {
		inv.GPUs = append(inv.GPUs, gpu.GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), NUMANode: i * 2 / n})
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			lvl := gpu.LinkSYS
			switch {
			case i/perSwitch == j/perSwitch:
				lvl = gpu.LinkPIX
			case inv.GPUs[i].NUMANode == inv.GPUs[j].NUMANode:
				lvl = gpu.LinkNODE
			}
			inv.Links = append(inv.Links, gpu.Link{A: inv.GPUs[i].UUID, B: inv.GPUs[j].UUID, Level: lvl})
		}
	}
	return inv
}

// nvlinkPairs is an 8-GPU box where GPUs are NVLinked in pairs (0-1, 2-3,
// ...) with 4 links, and otherwise on PCIe by socket.
func nvlinkPairs() gpu.Inventory {
	inv := pcieNode(8, 2)
	for i := range inv.Links {
		l := &inv.Links[i]
		var a, b int
		fmt.Sscanf(l.A, "GPU-%d", &a)
		fmt.Sscanf(l.B, "GPU-%d", &b)
		if a/2 == b/2 {
			l.Level, l.NVLinks = gpu.LinkNVLink, 4
		}
	}
	return inv
}

func ids(ns ...int) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = fmt.Sprintf("GPU-%d", n)
	}
	return out
}

func TestChoose(t *testing.T) {
	tests := []struct {
		name    string
		inv     gpu.Inventory
		free    []string
		n       int
		must    []string
		want    []string
		wantErr error
	}{
		{name: "pcie pair from one switch", inv: pcieNode(4, 2), free: ids(0, 1, 2, 3), n: 2, want: ids(0, 1)},
		{name: "pcie pair skips split switch", inv: pcieNode(4, 2), free: ids(0, 2, 3), n: 2, want: ids(2, 3)},
		{name: "single leaves pair intact", inv: pcieNode(4, 2), free: ids(0, 1, 2), n: 1, want: ids(2)},
		{name: "must include", inv: pcieNode(4, 2), free: ids(0, 1, 2, 3), n: 2, must: ids(3), want: ids(2, 3)},
		{name: "three keep a whole socket free", inv: pcieNode(8, 2), free: ids(0, 1, 2, 4, 5, 6, 7), n: 3, want: ids(0, 1, 2)},
		{name: "two avoid splitting a socket", inv: pcieNode(8, 2), free: ids(0, 1, 2, 4, 5, 6, 7), n: 2, want: ids(0, 1)},
		{name: "nvlink pair first", inv: nvlinkPairs(), free: ids(1, 2, 3, 4), n: 2, want: ids(2, 3)},
		{name: "four as two nvlink pairs", inv: nvlinkPairs(), free: ids(0, 1, 2, 3, 4, 5, 6, 7), n: 4, want: ids(0, 1, 2, 3)},
		{name: "too many", inv: pcieNode(4, 2), free: ids(0, 1), n: 3, wantErr: ErrInsufficient},
		{name: "unknown device", inv: pcieNode(4, 2), free: []string{"GPU-9"}, n: 1, wantErr: ErrUnknownDevice},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := New(tc.inv).Choose(tc.free, tc.n, tc.must)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Choose() error %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Choose() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestChooseMustIncludeNotFree(t *testing.T) {
	_, err := New(pcieNode(4, 2)).Choose(ids(0, 1), 2, ids(3))
	if err == nil || !strings.Contains(err.Error(), "GPU-3") {
		t.Fatalf("error %v should name the must-include device", err)
	}
}

// TestChooseGreedyMatchesExactOnSmallBoxes checks the greedy path (used for
// large boxes) finds sets as good as exhaustive search where both can run.
func TestChooseGreedyMatchesExactOnSmallBoxes(t *testing.T) {
	for _, inv := range []gpu.Inventory{pcieNode(8, 2), nvlinkPairs(), pcieNode(8, 4)} {
		m := New(inv)
		all := []int{0, 1, 2, 3, 4, 5, 6, 7}
		for k := 1; k <= 8; k++ {
			exact := m.chooseExact(all, nil, all, k)
			greedy := m.chooseGreedy(all, nil, all, k)
			if m.setCost(greedy) != m.setCost(exact) {
				t.Errorf("k=%d greedy cost %d (%v), exact %d (%v)", k, m.setCost(greedy), greedy, m.setCost(exact), exact)
			}
		}
	}
}

func TestChooseLarge(t *testing.T) {
	inv := pcieNode(64, 8)
	got, err := New(inv).Choose(New(inv).IDs(), 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, ids(0, 1, 2, 3, 4, 5, 6, 7)) {
		t.Fatalf("64-GPU box, 8 GPUs: %v, want one whole switch", got)
	}
}

func TestFormatMatchesNvidiaSmi(t *testing.T) {
	inv := pcieNode(4, 2)
	for i := range inv.GPUs {
		inv.GPUs[i].CPUAffinity = []int{0, 1, 2, 3, 8}
	}
	var b bytes.Buffer
	if err := Format(&b, inv); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity", "GPU0\t X \tPIX\tSYS\tSYS\t0-3,8", "PIX  = Connection traversing at most a single PCIe bridge"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestLinkJSONRoundTrip(t *testing.T) {
	for _, l := range []gpu.Link{{A: "a", B: "b", Level: gpu.LinkNVLink, NVLinks: 12}, {A: "a", B: "b", Level: gpu.LinkPXB}} {
		b, err := l.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var back gpu.Link
		if err := back.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		if back != l {
			t.Fatalf("round trip %s: %+v != %+v", b, back, l)
		}
	}
}
