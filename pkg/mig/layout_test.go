package mig

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/simnode"
)

func TestCatalogPerModel(t *testing.T) {
	tests := []struct {
		node      string
		wantNames []string
		// one profile's go-nvml index and the driver's ID, which differ
		oneName  string
		oneIndex int
		oneID    uint32
		oneStart []int
	}{
		{node: "dgx-a100", wantNames: []string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
			oneName: "3g.20gb", oneIndex: 2, oneID: 9, oneStart: []int{0, 4}},
		{node: "dgx-h100", wantNames: []string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
			oneName: "1g.10gb", oneIndex: 0, oneID: 19, oneStart: []int{0, 1, 2, 3, 4, 5, 6}},
		{node: "dgx-h200", wantNames: []string{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
			oneName: "7g.141gb", oneIndex: 4, oneID: 0, oneStart: []int{0}},
		{node: "pcie-l40s"},
	}
	for _, tc := range tests {
		t.Run(tc.node, func(t *testing.T) {
			st := mustState(t, simnode.NewBuiltin(tc.node))
			g := st.GPUs[0]
			if tc.wantNames == nil {
				if g.MIGCapable || len(g.Catalog.Profiles) != 0 {
					t.Fatalf("%s: MIG capable %v with %d profiles, want none", tc.node, g.MIGCapable, len(g.Catalog.Profiles))
				}
				return
			}
			if got := g.Catalog.Names(); !slices.Equal(got, tc.wantNames) {
				t.Errorf("profiles = %v, want %v", got, tc.wantNames)
			}
			p, err := g.Catalog.Lookup(tc.oneName)
			if err != nil {
				t.Fatal(err)
			}
			var starts []int
			for _, pl := range p.Placements {
				starts = append(starts, pl.Start)
			}
			if p.Index != tc.oneIndex || p.ID != tc.oneID || !slices.Equal(starts, tc.oneStart) {
				t.Errorf("%s: index %d id %d starts %v, want %d %d %v", tc.oneName, p.Index, p.ID, starts, tc.oneIndex, tc.oneID, tc.oneStart)
			}
			if g.Catalog.MemorySlices != 8 || g.Catalog.ComputeSlices != 7 {
				t.Errorf("slices: memory %d compute %d, want 8 and 7", g.Catalog.MemorySlices, g.Catalog.ComputeSlices)
			}
		})
	}
}

func TestLookupLongForm(t *testing.T) {
	cat := a100(t).GPUs[0].Catalog
	p, err := cat.Lookup("1c.1g.5gb")
	if err != nil || p.Name != "1g.5gb" {
		t.Fatalf("Lookup(1c.1g.5gb) = %q, %v; want 1g.5gb", p.Name, err)
	}
}

// manyConfigs is a layout file with n configs of one entry each.
func manyConfigs(n int) string {
	var b strings.Builder
	b.WriteString("version: v1\nmig-configs:\n")
	for i := range n {
		fmt.Fprintf(&b, "  c%d: [{devices: all, mig-enabled: false}]\n", i)
	}
	return b.String()
}

// badLayouts are layout files that must be refused, with what the error
// must say. They also seed FuzzParseLayoutFile.
var badLayouts = []struct {
	name    string
	file    string
	config  string // resolved on a dgx-a100 when the file parses
	wantErr error
	errHas  []string
}{
	{name: "a billion slices", file: "version: v1\nmig-configs:\n  huge:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 1000000000}\n",
		wantErr: ErrBadLayout, errHas: []string{`"huge" entry 0`, `"1g.5gb"`, "1000000000", "at most 7"}},
	{name: "more than 7 in total", file: "version: v1\nmig-configs:\n  sum:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 4, \"2g.10gb\": 4}\n",
		wantErr: ErrBadLayout, errHas: []string{`"sum" entry 0`, "8 slices", "at most 7"}},
	{name: "more than 7 placements", file: "version: v1\nmig-configs:\n  p:\n    - devices: [0]\n      mig-enabled: true\n      mig-placements: [a@0, a@1, a@2, a@3, a@4, a@5, a@6, a@7]\n",
		wantErr: ErrBadLayout, errHas: []string{`"p" entry 0`, "8 slices"}},
	{name: "fractional count", file: "version: v1\nmig-configs:\n  f:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 2.5}\n",
		wantErr: ErrBadLayout, errHas: []string{"[6:31]", "2.5 is not a whole number"}},
	{name: "200,000 configs", file: manyConfigs(200000), wantErr: ErrBadLayout, errHas: []string{"[4099:3]", "too many keys"}},
	{name: "2,000 configs", file: manyConfigs(2000), wantErr: ErrBadLayout, errHas: []string{"2000 mig-configs", "at most 1024"}},
	{name: "too many entries", file: "version: v1\nmig-configs:\n  e: [" + strings.Repeat("{devices: all, mig-enabled: false},", MaxLayoutEntries+1) + "]\n",
		wantErr: ErrBadLayout, errHas: []string{`"e"`, "65 entries"}},
	{name: "too many devices", file: "version: v1\nmig-configs:\n  d: [{devices: [" + strings.Repeat("0,", MaxLayoutDevices+1) + "], mig-enabled: false}]\n",
		wantErr: ErrBadLayout, errHas: []string{`"d" entry 0`, "257 GPUs"}},
	{name: "unknown field", file: "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabeld: true\n",
		wantErr: ErrBadLayout, errHas: []string{"mig-enabeld"}},
	{name: "wrong version", file: "version: v2\nmig-configs:\n  a:\n    - devices: all\n", wantErr: ErrBadLayout, errHas: []string{`version "v2"`}},
	{name: "not yaml", file: "version: v1\nmig-configs: [\n", wantErr: ErrBadLayout},
	{name: "no configs", file: "version: v1\n", wantErr: ErrBadLayout, errHas: []string{"no mig-configs"}},
	{name: "bad devices", file: "version: v1\nmig-configs:\n  half:\n    - devices: some\n      mig-enabled: false\n",
		wantErr: ErrBadLayout, errHas: []string{`"half" entry 0`, `devices "some"`}},
	{name: "negative count", file: "version: v1\nmig-configs:\n  neg:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": -1}\n",
		wantErr: ErrBadLayout, errHas: []string{`"neg" entry 0`, `"1g.5gb"`, "negative"}},
	{name: "devices with mig off", file: "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: false\n      mig-devices: {\"1g.5gb\": 1}\n",
		wantErr: ErrBadLayout, errHas: []string{"mig-enabled: false"}},
	{name: "bad placement syntax", file: "version: v1\nmig-configs:\n  p:\n    - devices: [0]\n      mig-enabled: true\n      mig-placements: [\"3g.20gb\"]\n",
		wantErr: ErrBadLayout, errHas: []string{`"3g.20gb"`, "PROFILE@START"}},
	{name: "unknown profile", file: "version: v1\nmig-configs:\n  custom:\n    - devices: [0, 1]\n      mig-enabled: true\n      mig-devices: {\"1g.6gb\": 2}\n",
		config: "custom", wantErr: ErrUnknownProfile, errHas: []string{`"custom" entry 0`, "gpu 0,1", `"1g.6gb"`, "1g.5gb, 1g.5gb+me"}},
	{name: "unknown config", file: "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n",
		config: "b", wantErr: ErrBadLayout, errHas: []string{`"b"`, "the file has a"}},
	{name: "gpu out of range", file: "version: v1\nmig-configs:\n  a:\n    - devices: [9]\n      mig-enabled: false\n",
		config: "a", wantErr: ErrBadLayout, errHas: []string{"gpu 9", "8 GPUs"}},
	{name: "unknown uuid", file: "version: v1\nmig-configs:\n  a:\n    - devices: [GPU-nope]\n      mig-enabled: false\n",
		config: "a", wantErr: ErrBadLayout, errHas: []string{`"GPU-nope"`}},
	{name: "gpu in two entries", file: "version: v1\nmig-configs:\n  a:\n    - devices: [1]\n      mig-enabled: false\n    - devices: all\n      mig-enabled: false\n",
		config: "a", wantErr: ErrBadLayout, errHas: []string{"gpu 1 is also in entry 0"}},
	{name: "placement not allowed", file: "version: v1\nmig-configs:\n  a:\n    - devices: [0]\n      mig-enabled: true\n      mig-placements: [\"3g.20gb@2\"]\n",
		config: "a", wantErr: ErrBadLayout, errHas: []string{"3g.20gb cannot start at memory slice 2", "allowed starts: 0, 4"}},
}

func TestBadLayoutFiles(t *testing.T) {
	for _, tc := range badLayouts {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseLayoutFile([]byte(tc.file))
			if err == nil && tc.config != "" {
				_, err = f.Resolve(tc.config, a100(t))
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestLayoutFileForms(t *testing.T) {
	st := a100(t)
	f, err := ParseLayoutFile([]byte(`version: v1
mig-configs:
  by-uuid:
    - devices: [` + st.GPUs[2].UUID + `]
      mig-enabled: true
      mig-placements: ["3g.20gb@4"]
    - devices: all
      device-filter: "0x20B010DE"
      mig-enabled: false
    - devices: all
      device-filter: ["0x1234ABCD"]
      mig-enabled: true
`))
	if err == nil {
		_, err = f.Resolve("by-uuid", st)
	}
	if err == nil || !strings.Contains(err.Error(), "gpu 2 is also in entry 0") {
		t.Fatalf("want the all entry to collide with gpu 2, got %v", err)
	}
	f.MigConfigs["by-uuid"][1].Devices = []any{uint64(0), uint64(1)}
	d, err := f.Resolve("by-uuid", st)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]GPUWants{
		0: {MIGEnabled: false}, 1: {MIGEnabled: false},
		2: {MIGEnabled: true, Slices: []Want{{Profile: "3g.20gb", Start: 4}}},
	}
	if len(d.GPUs) != len(want) {
		t.Fatalf("resolved GPUs %v, want %v (the 0x1234ABCD filter matches none)", d.GPUs, want)
	}
	for i, w := range want {
		if g := d.GPUs[i]; g.MIGEnabled != w.MIGEnabled || !slices.Equal(g.Slices, w.Slices) {
			t.Errorf("gpu %d = %+v, want %+v", i, g, w)
		}
	}
}
