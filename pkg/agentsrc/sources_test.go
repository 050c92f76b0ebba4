package agentsrc

import (
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/timeslice"
)

// TestOpenReadsTheNodeOnce: Open reads the inventory before returning,
// hands the sharing check that inventory, and a sharing config the node
// cannot take stops it.
func TestOpenReadsTheNodeOnce(t *testing.T) {
	n := simnode.NewBuiltin("dgx-a100")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Config{Node: "node-1", PodResourcesSocket: filepath.Join(t.TempDir(), "kubelet.sock")}
	var seen int
	cfg.Sharing = func(inv gpu.Inventory) (timeslice.Config, error) {
		seen = len(inv.GPUs)
		return timeslice.Config{}, nil
	}
	s, err := Open(cfg, n, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(log)
	if inv, ok := s.Store.Inventory(); !ok || len(inv.GPUs) != 8 || seen != 8 {
		t.Fatalf("after Open: inventory read %v with %d GPUs, sharing check saw %d; want 8 and 8", ok, len(inv.GPUs), seen)
	}
	if s.Node != "node-1" || s.Sharing == nil || s.Health == nil || s.Pods == nil {
		t.Fatalf("Open = %+v, want every source set", s)
	}

	bad := errors.New("--sharing-config: GPU-x is not a device of this node")
	cfg.Sharing = func(gpu.Inventory) (timeslice.Config, error) { return timeslice.Config{}, bad }
	if _, err := Open(cfg, n, log); !errors.Is(err, bad) {
		t.Fatalf("Open with a sharing config the node cannot take = %v, want %v", err, bad)
	}
}

// TestValidate: a missing node name or socket is named.
func TestValidate(t *testing.T) {
	err := Config{}.Validate()
	if err == nil || !strings.Contains(err.Error(), "node name") || !strings.Contains(err.Error(), "PodResources socket") {
		t.Fatalf("Config{}.Validate() = %v, want both missing fields named", err)
	}
	if err := (Config{Node: "n", PodResourcesSocket: "/s"}).Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
}
