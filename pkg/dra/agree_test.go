package dra

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/pkg/dra/prepared"
	"github.com/gpud/gpud/pkg/mig"
)

// liveMIG is one GPU's MIG mode and device UUIDs as the (simulated)
// hardware has them now.
func liveMIG(t *testing.T, e *prepEnv, gpuUUID string) (modeOn bool, uuids []string) {
	t.Helper()
	st, err := mig.ReadState(e.node)
	if err != nil {
		t.Fatalf("read MIG state: %v", err)
	}
	for _, g := range st.GPUs {
		if g.UUID != gpuUUID {
			continue
		}
		for _, in := range g.Instances {
			for _, ci := range in.CIs {
				uuids = append(uuids, ci.UUID)
			}
		}
		return g.MIGEnabled, uuids
	}
	t.Fatalf("gpu %s not on the node", gpuUUID)
	return false, nil
}

// checkAgree asserts that a claim's checkpoint entry (read from disk, as a
// restarted agent reads it), its CDI spec and the MIG devices and mode of
// gpuUUID agree: a prepared claim has a spec and its MIG devices exist;
// a claim not in the checkpoint has no spec and left no MIG device, and the
// GPU (whose MIG mode was off before) is back to MIG mode off. allocated
// says whether the API still allocates the claim: then it must be
// prepared.
func checkAgree(t *testing.T, e *prepEnv, uid types.UID, gpuUUID string, allocated bool) {
	t.Helper()
	cp, err := prepared.Read(e.stateDir)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	modeOn, live := liveMIG(t, e, gpuUUID)
	_, specErr := os.Stat(cdiSpecPath(e.cdiDir, uid))
	entry, ok := cp.Claims[uid]
	if allocated && (!ok || entry.State != prepared.StatePrepared) {
		t.Fatalf("claim %s is allocated but not prepared: entry %+v (in checkpoint: %v)", uid, entry, ok)
	}
	if !ok {
		if !errors.Is(specErr, fs.ErrNotExist) {
			t.Fatalf("claim %s not in the checkpoint, but its CDI spec is there (%v)", uid, specErr)
		}
		if len(live) != 0 || modeOn {
			t.Fatalf("claim %s not in the checkpoint, but gpu %s has MIG mode %v and devices %v", uid, gpuUUID, modeOn, live)
		}
		return
	}
	if entry.State != prepared.StatePrepared {
		t.Fatalf("claim %s is %s with no call in flight", uid, entry.State)
	}
	if specErr != nil {
		t.Fatalf("claim %s prepared without a CDI spec: %v", uid, specErr)
	}
	spec := readSpec(t, e.cdiDir, string(uid))
	for _, d := range entry.Devices {
		if d.Device.Type != TypeMIG {
			continue
		}
		if !slices.Contains(live, d.Device.MIGUUID) {
			t.Fatalf("claim %s prepared with MIG device %s, which does not exist (live: %v, mode on: %v)", uid, d.Device.MIGUUID, live, modeOn)
		}
		cd := spec.GetDevice(cdiDeviceName(uid, d))
		gi, ci := migCapMinor(d.Device.GPUMinor, d.Device.GIID, d.Device.CIID)
		want := []string{fmt.Sprintf("/dev/nvidia%d", d.Device.GPUMinor), "/dev/nvidia-caps/nvidia-cap" + itoa(gi), "/dev/nvidia-caps/nvidia-cap" + itoa(ci)}
		if cd == nil || !slices.Equal(deviceNodes(cd), want) {
			t.Fatalf("claim %s: CDI device %v, want nodes %v", uid, cd, want)
		}
	}
	migs := 0
	for _, d := range entry.Devices {
		if d.Device.Type == TypeMIG && d.Device.GPUUUID == gpuUUID {
			migs++
		}
	}
	if n := len(live); n != migs {
		t.Fatalf("claim %s has %d devices, gpu %s has MIG devices %v", uid, len(entry.Devices), gpuUUID, live)
	}
}

// TestPrepareAfterUnprepareStaleTable: the published device table lags the
// hardware (the driver republishes after the MIG service's rediscovery):
// right after an unprepare destroyed a dynamic MIG device, the table still
// shows it existing. A prepare then must create it again, not hand out a
// CDI spec for the destroyed device.
func TestPrepareAfterUnprepareStaleTable(t *testing.T) {
	e := newPrepEnv(t, "dgx-h100", nil)
	e.mig = newSimMIG(e.node, filepath.Join(t.TempDir(), "journal.json"))
	const dev = "gpu-4-mig-1g10gb-6"
	parent := e.tab.pub.Devices[dev].GPUUUID
	c := claim("s1", "s1", alloc{pool: e.name, device: dev})
	p := e.preparer()
	if _, err := prepareOne(t, p, c); err != nil {
		t.Fatal(err)
	}
	e.rediscover() // the table shows the device existing
	if err := unprepareOne(t, p, "s1"); err != nil {
		t.Fatal(err)
	}
	checkAgree(t, e, "s1", parent, false)
	// No rediscovery yet: the table is stale.
	if _, err := prepareOne(t, p, c); err != nil {
		t.Fatal(err)
	}
	checkAgree(t, e, "s1", parent, true)
	if err := unprepareOne(t, p, "s1"); err != nil {
		t.Fatal(err)
	}
	checkAgree(t, e, "s1", parent, false)
}

// TestConcurrentPrepareUnprepareOneClaim is the race the issue found: many
// prepares and unprepares of one dynamic MIG claim at once, while the
// driver republishes in the background. After every round the claim's
// checkpoint entry, CDI spec and MIG device agree; a final unprepare
// leaves the GPU as it was (MIG mode off, whole). Run with -race.
func TestConcurrentPrepareUnprepareOneClaim(t *testing.T) {
	e := newPrepEnv(t, "dgx-h100", nil)
	e.mig = newSimMIG(e.node, filepath.Join(t.TempDir(), "journal.json"))
	const dev = "gpu-3-mig-1g10gb-6"
	parent := e.tab.pub.Devices[dev].GPUUUID
	c := claim("r", "r", alloc{pool: e.name, device: dev})
	p := e.preparer()

	// The driver's republish loop, lagging the hardware.
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			e.rediscover()
		}
	})
	defer func() { close(stop); bg.Wait() }()

	const rounds, each = 12, 10
	for round := range rounds {
		var wg sync.WaitGroup
		for i := range 2 * each {
			wg.Go(func() {
				if i%2 == 0 {
					res, err := p.Prepare(t.Context(), []*resourceapi.ResourceClaim{c})
					if err != nil {
						t.Errorf("Prepare: %v", err)
					} else if res[c.UID].Err != nil && !errors.Is(res[c.UID].Err, ErrInUse) {
						t.Logf("round %d: prepare: %v", round, res[c.UID].Err)
					}
					return
				}
				if err := unprepareOne(t, p, "r"); err != nil {
					t.Logf("round %d: unprepare: %v", round, err)
				}
			})
		}
		wg.Wait()
		checkAgree(t, e, "r", parent, false)
		if err := unprepareOne(t, p, "r"); err != nil {
			t.Fatalf("round %d: final unprepare: %v", round, err)
		}
		checkAgree(t, e, "r", parent, false)
	}
}

// TestMIGModeRestoredAfterRestart: a dynamic MIG claim on a GPU whose MIG
// mode was off turns it on; after an agent restart (a fresh preparer and
// MIG manager over the same state dir and node), unprepare turns it off
// again so the GPU is offered whole, as before the claim.
func TestMIGModeRestoredAfterRestart(t *testing.T) {
	e := newPrepEnv(t, "dgx-h100", nil)
	journal := filepath.Join(t.TempDir(), "journal.json")
	e.mig = newSimMIG(e.node, journal)
	const dev = "gpu-2-mig-2g20gb-4"
	parent := e.tab.pub.Devices[dev].GPUUUID
	if _, err := prepareOne(t, e.preparer(), claim("m", "m", alloc{pool: e.name, device: dev})); err != nil {
		t.Fatal(err)
	}
	if on, _ := liveMIG(t, e, parent); !on {
		t.Fatal("MIG mode off after a dynamic MIG prepare")
	}
	e.mig = newSimMIG(e.node, journal) // the restart
	e.rediscover()
	if err := unprepareOne(t, e.preparer(), "m"); err != nil {
		t.Fatal(err)
	}
	checkAgree(t, e, "m", parent, false)
	e.rediscover()
	if _, ok := e.tab.pub.Devices["gpu-2"]; !ok {
		t.Error("gpu-2 is not offered whole after its last dynamic MIG claim went")
	}
}
