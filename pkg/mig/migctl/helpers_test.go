package migctl

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/simnode"
)

const testLayouts = `version: v1
mig-configs:
  two-3g:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
  seven-1g:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
`

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newService is the agent's MIG service on n: journal (none when empty),
// GPU resets through the simulated node when reset, allocs as the
// kubelet's allocations (may be nil).
func newService(t testing.TB, n *simnode.Node, journal string, reset bool, allocs mig.AllocationLister) *mig.Service {
	t.Helper()
	var opts []mig.ApplierOption
	if journal != "" {
		opts = append(opts, mig.WithJournal(journal))
	}
	if reset {
		opts = append(opts, mig.WithResetter(n.ResetGPU))
	}
	svc, err := mig.NewService(mig.ServiceConfig{
		Lib: n, Applier: mig.NewApplier(n, nil, opts...),
		Processes: discovery.ProcessReader{Lib: n}, Allocations: allocs,
	})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// writeLayouts writes testLayouts to a file under t's temp dir.
func writeLayouts(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "layouts.yaml")
	if err := os.WriteFile(path, []byte(testLayouts), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustLayouts(t testing.TB) mig.LayoutFile {
	t.Helper()
	f, err := mig.ParseLayoutFile([]byte(testLayouts))
	if err != nil {
		t.Fatal(err)
	}
	return f
}
