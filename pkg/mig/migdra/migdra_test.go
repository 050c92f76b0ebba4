package migdra

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/simnode"
)

// TestNodeStateFromSim: the node-state source on these catalogs gives
// each MIG-capable GPU its catalog, read once, so the slice builder
// publishes dynamic MIG devices on H100 (MIG mode turns on live) and none
// on an A100 with MIG off.
func TestNodeStateFromSim(t *testing.T) {
	for _, tc := range []struct {
		profile string
		dynamic bool
	}{{"dgx-h100", true}, {"dgx-a100", false}} {
		t.Run(tc.profile, func(t *testing.T) {
			n := simnode.NewBuiltin(tc.profile)
			t.Cleanup(n.Close)
			inv, err := discovery.New(n, tc.profile, nil).Inventory()
			if err != nil {
				t.Fatal(err)
			}
			reads := 0
			src := dra.NewNodeStateSource(dra.NodeStateConfig{MIGCatalogs: Catalogs(func() (mig.State, error) { reads++; return mig.ReadState(n) })})
			st := src.NodeState(inv)
			_ = src.NodeState(inv)
			if reads != 1 {
				t.Errorf("catalogs read %d times, want once", reads)
			}
			if len(st.MIG) != len(inv.GPUs) {
				t.Fatalf("%d catalogs for %d GPUs", len(st.MIG), len(inv.GPUs))
			}
			st.Inventory = inv
			pub, err := dra.Build(tc.profile, st)
			if err != nil {
				t.Fatal(err)
			}
			mig1g := 0
			for name, ref := range pub.Devices {
				if ref.Type == dra.TypeMIG && ref.Dynamic() && strings.Contains(name, "-mig-1g") {
					mig1g++
				}
			}
			if got := mig1g > 0; got != tc.dynamic {
				t.Errorf("%d dynamic 1g MIG devices, want some: %v", mig1g, tc.dynamic)
			}
			if _, ok := pub.Devices[dra.GPUDeviceName(0)]; !ok {
				t.Error("no gpu-0")
			}
		})
	}
}

// TestManager: the driver's MIG manager creates a slice through the MIG
// service (which rediscovers: the store shows it), finds it and destroys
// it.
func TestManager(t *testing.T) {
	n := simnode.NewBuiltin("dgx-h100")
	t.Cleanup(n.Close)
	store := discovery.NewStore(discovery.New(n, "dgx-h100", nil), nil)
	if _, err := store.Rediscover(); err != nil {
		t.Fatal(err)
	}
	svc, err := mig.NewService(mig.ServiceConfig{
		Lib: n, Applier: mig.NewApplier(n, nil, mig.WithJournal(filepath.Join(t.TempDir(), "journal.json"))),
		Processes: discovery.ProcessReader{Lib: n},
		Changed:   func(mig.Result) { _, _ = store.Rediscover() },
	})
	if err != nil {
		t.Fatal(err)
	}
	m := Manager{Slices: mig.NewSlices(svc)}
	inv, _ := store.Inventory()
	parent := inv.GPUs[5].UUID
	c, err := m.Create(t.Context(), parent, "1g.10gb", 6)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if c.UUID == "" || !strings.HasPrefix(c.UUID, "MIG-") {
		t.Fatalf("created %+v", c)
	}
	if got := migUUIDs(store, 5); !slices.Equal(got, []string{c.UUID}) {
		t.Fatalf("inventory gpu 5 MIG devices after create = %v, want [%s]", got, c.UUID)
	}
	if l, err := m.Lookup(t.Context(), parent, "1g.10gb", 6); err != nil || l.Device.UUID != c.UUID || !l.ModeOn {
		t.Fatalf("Lookup = %+v, %v; want %s with MIG mode on", l, err, c.UUID)
	}
	if off, err := m.Destroy(t.Context(), parent, c.UUID, c.ModeEnabled); err != nil || !off {
		t.Fatalf("Destroy = %v, %v; want MIG mode off again", off, err)
	}
	inv, _ = store.Inventory()
	if g := inv.GPUs[5]; g.MIGEnabled || len(g.MIGDevices) > 0 {
		t.Fatalf("gpu 5 after destroy: mig %v, devices %v", g.MIGEnabled, migUUIDs(store, 5))
	}
	if l, err := m.Lookup(t.Context(), parent, "1g.10gb", 6); err != nil || l.Device.UUID != "" || l.ModeOn {
		t.Fatalf("Lookup after destroy = %+v, %v; want nothing, MIG mode off", l, err)
	}
}

func migUUIDs(store *discovery.Store, index int) []string {
	inv, _ := store.Inventory()
	var out []string
	for _, g := range inv.GPUs {
		if g.Index != index {
			continue
		}
		for _, d := range g.MIGDevices {
			out = append(out, d.UUID)
		}
	}
	return out
}
