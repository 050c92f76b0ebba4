package dra

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpud/gpud/pkg/dra/prepared"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/simnode"
)

// The fault-injection test's node and claim: one dynamic MIG device on a
// GPU whose MIG mode is off (so prepare turns it on and unprepare must turn
// it off again) and one whole GPU.
const (
	faultNode  = "dgx-h100"
	faultUID   = types.UID("fault-claim")
	faultMIG   = "gpu-2-mig-2g20gb-4"
	faultWhole = "gpu-3"
)

// The files of one agent's life under a base dir: the plugin dir (the
// checkpoint), the CDI dir, the MIG journal and the simulated node's
// state file. A SIGKILL leaves exactly these; a copy of them taken at some
// point is what a kill there leaves.
func faultDirs(base string) (stateDir, cdiDir, journal, simState string) {
	return filepath.Join(base, "plugin"), filepath.Join(base, "cdi"), filepath.Join(base, "journal.json"), filepath.Join(base, "sim.json")
}

// startAgent starts an agent on base as `gpud agent --kubelet-api dra
// --simulate` starts after a restart: the node from its state file, the
// MIG service's recovery of an interrupted apply, a fresh preparer on the
// checkpoint and a device table from the node as it is.
func startAgent(t *testing.T, base string) (*prepEnv, *Preparer) {
	t.Helper()
	stateDir, cdiDir, journal, simFile := faultDirs(base)
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	n := simnode.NewBuiltin(faultNode, simnode.WithStateFile(simFile))
	t.Cleanup(n.Close)
	m := newSimMIG(n, journal)
	if _, _, err := m.svc.Recover(t.Context()); err != nil && !errors.Is(err, mig.ErrRolledBack) {
		t.Fatalf("MIG recovery at start: %v", err)
	}
	st := simState(t, n, faultNode)
	pub, err := Build(faultNode, st)
	if err != nil {
		t.Fatal(err)
	}
	e := &prepEnv{t: t, node: n, name: faultNode, stateDir: stateDir, cdiDir: cdiDir, tab: &table{pub: pub}, mig: m, st: st}
	return e, e.preparer()
}

// copyTree copies the regular files under src to dst (temp files too: a
// kill leaves them).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, data, 0o600)
	})
}

func faultClaim(pool string) *resourceapi.ResourceClaim {
	return claim(string(faultUID), "fault", alloc{request: "mig", pool: pool, device: faultMIG}, alloc{request: "whole", pool: pool, device: faultWhole})
}

// lifecycle prepares and unprepares the fault claim; phase says which of
// the two is running.
func lifecycle(t *testing.T, p *Preparer, pool string, phase *atomic.Value) (prepErr, unprepErr error) {
	phase.Store("prepare")
	res, err := p.Prepare(t.Context(), []*resourceapi.ResourceClaim{faultClaim(pool)})
	if err != nil {
		return err, nil
	}
	prepErr = res[faultUID].Err
	phase.Store("unprepare")
	ures, err := p.Unprepare(t.Context(), faultObjects())
	if err != nil {
		return prepErr, err
	}
	return prepErr, ures[faultUID]
}

// recoverAndCheck restarts an agent on what the kill left (killed) and
// does what the kubelet does next, checking after each call that the
// checkpoint, the CDI spec, the MIG devices and the GPU's mode agree with
// what the API allocates: after a kill in prepare, the kubelet retries the
// prepare while the pod still wants the claim (allocated), or unprepares
// it when the pod went meanwhile; after a kill in unprepare it retries the
// unprepare.
func recoverAndCheck(t *testing.T, killed, phase string, podGone bool) {
	t.Helper()
	e, p := startAgent(t, killed)
	parent := e.tab.pub.Devices[faultMIG].GPUUUID
	if phase == "prepare" && !podGone {
		devs, err := prepareOne(t, p, faultClaim(e.name))
		if err != nil || len(devs) != 2 {
			t.Fatalf("prepare after the restart = %+v, %v; want both devices", devs, err)
		}
		checkAgree(t, e, faultUID, parent, true)
	}
	if err := unprepareOne(t, p, string(faultUID)); err != nil {
		t.Fatalf("unprepare after the restart: %v", err)
	}
	checkAgree(t, e, faultUID, parent, false)
	_, _, journal, _ := faultDirs(killed)
	if _, err := os.Stat(journal); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("MIG journal left after recovery: %v", err)
	}
	e.rediscover()
	if _, ok := e.tab.pub.Devices["gpu-2"]; !ok {
		t.Error("gpu-2 is not offered whole again")
	}
	if cp, err := prepared.Read(e.stateDir); err != nil || len(cp.MIGModeOwners) != 0 {
		t.Errorf("checkpoint after the claim went: MIG mode owners %v, %v; want none", cp.MIGModeOwners, err)
	}
}

// TestFaultAtEveryStep kills the agent (SIGKILL: the files as they are at
// that moment) at every step of preparing and unpreparing a claim with a
// dynamic MIG device, restarts it and checks that state and API agree.
func TestFaultAtEveryStep(t *testing.T) {
	for _, step := range faultSteps {
		for _, podGone := range []bool{false, true} {
			if podGone && !strings.HasPrefix(step, "prepare") {
				continue
			}
			t.Run(fmt.Sprintf("%s/pod-gone=%v", step, podGone), func(t *testing.T) {
				base, killed := t.TempDir(), filepath.Join(t.TempDir(), "killed")
				e, p := startAgent(t, base)
				var phase atomic.Value
				var copied bool
				p.atStep = func(s string) {
					if s == step && !copied {
						copied = true
						if err := copyTree(base, killed); err != nil {
							t.Errorf("copy at %q: %v", s, err)
						}
					}
				}
				if perr, uerr := lifecycle(t, p, e.name, &phase); perr != nil || uerr != nil {
					t.Fatalf("the run without a kill failed: prepare %v, unprepare %v", perr, uerr)
				}
				e.node.Close()
				if !copied {
					t.Fatalf("step %q never reached", step)
				}
				recoverAndCheck(t, killed, strings.TrimSuffix(strings.Fields(step)[0], ":"), podGone)
			})
		}
	}
}

// TestFaultInsideMIGApply kills the agent inside the MIG applier: while
// an NVML call that changes the layout or the mode is in flight (the node
// state file holds the state before it, the MIG journal the apply), for
// every such call prepare and unprepare make.
func TestFaultInsideMIGApply(t *testing.T) {
	for _, op := range []string{"SetMigMode", "CreateGpuInstance", "CreateComputeInstance", "DestroyComputeInstance", "DestroyGpuInstance"} {
		for after := 0; ; after++ {
			name := fmt.Sprintf("%s#%d", op, after+1)
			hitOnce := false
			t.Run(name, func(t *testing.T) {
				base, killed := t.TempDir(), filepath.Join(t.TempDir(), "killed")
				e, p := startAgent(t, base)
				hit := make(chan struct{}, 1)
				e.node.InjectFault(op, simnode.FaultSpec{After: after, Delay: time.Hour, Hit: hit})
				var phase atomic.Value
				done := make(chan struct{})
				var wg sync.WaitGroup
				wg.Go(func() {
					defer close(done)
					_, _ = lifecycle(t, p, e.name, &phase) // the run ends on a dead node
				})
				select {
				case <-done:
					return // no such call left: the op is covered
				case <-hit:
				}
				hitOnce = true
				if err := copyTree(base, killed); err != nil {
					t.Fatal(err)
				}
				at := phase.Load().(string)
				e.node.Close() // the stalled call returns; nothing more is saved on the node
				wg.Wait()
				for _, podGone := range []bool{false, true} {
					if podGone && at != "prepare" {
						continue
					}
					again := filepath.Join(t.TempDir(), "again")
					if err := copyTree(killed, again); err != nil {
						t.Fatal(err)
					}
					t.Run(fmt.Sprintf("in-%s/pod-gone=%v", at, podGone), func(t *testing.T) { recoverAndCheck(t, again, at, podGone) })
				}
			})
			if !hitOnce {
				break
			}
		}
	}
}

func faultObjects() []kubeletplugin.NamespacedObject {
	return []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "fault"}, UID: faultUID}}
}
