package prepared

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/internal/fileio"
)

// v1Checkpoint is a checkpoint as gpud before issue 24 wrote it (version
// 1: no checksum, no MIG mode owners): one whole GPU and one dynamic MIG
// device it created.
const v1Checkpoint = `{"version":1,"claims":{"uid-a":{"namespace":"ns","name":"a","state":"Prepared","devices":[` +
	`{"requests":["gpu"],"device":{"name":"gpu-3","type":"gpu","gpuUUID":"GPU-3","gpuIndex":3,"gpuMinor":3,"memoryBytes":85899345920,"placement":{"start":0,"size":0}},` +
	`"memoryBytes":85899345920,"cdiDeviceIDs":["k8s.gpu.gpud.io/claim=uid-a-gpu-3"]}]},` +
	`"uid-b":{"namespace":"ns","name":"b","state":"Preparing","devices":[` +
	`{"requests":["mig"],"device":{"name":"gpu-1-mig-1g10gb-6","type":"mig","gpuUUID":"GPU-1","gpuIndex":1,"gpuMinor":1,"memoryBytes":10737418240,"profile":"1g.10gb","placement":{"start":6,"size":1}},` +
	`"created":true,"creating":true,"cdiDeviceIDs":null}]}}}`

// v2Checkpoint is a checkpoint as gpud before memory limits (issue 23)
// wrote it (version 2, checksummed): a 20 GiB fraction of an 80 GiB GPU.
const v2Checkpoint = `{"version":2,"checksum":3156628447,"claims":{"uid-f":{"namespace":"ns","name":"frac","state":"Prepared","devices":[` +
	`{"requests":["gpu"],"device":{"name":"gpu-0","type":"gpu","gpuUUID":"GPU-0","gpuIndex":0,"gpuMinor":0,"memoryBytes":85899345920,"shareable":true,"placement":{"start":0,"size":0}},` +
	`"shareID":"a1b2","memoryBytes":21474836480,"coresPercent":25,"cdiDeviceIDs":["k8s.gpu.gpud.io/claim=uid-f-gpu-0-a1b2"]}]}}}`

func testCheckpoint() Checkpoint {
	cp := NewCheckpoint()
	cp.Claims["uid-a"] = Claim{Namespace: "ns", Name: "a", State: StatePrepared, Devices: []Device{{
		Requests: []string{"gpu"}, Device: DeviceRef{Name: "gpu-1-mig-1g10gb-6", Type: TypeMIG, GPUUUID: "GPU-1", GPUIndex: 1, GPUMinor: 1,
			MemoryBytes: 10 << 30, Profile: "1g.10gb", Placement: Placement{Start: 6, Size: 1}, MIGUUID: "MIG-1", GIID: 13},
		Created: true, EnablesMIGMode: true, CDIDeviceIDs: []string{"k8s.gpu.gpud.io/claim=uid-a-gpu-1-mig-1g10gb-6"}}}}
	cp.Claims["uid-f"] = Claim{Namespace: "ns", Name: "frac", State: StatePrepared, Devices: []Device{{
		Requests: []string{"gpu"}, Device: DeviceRef{Name: "gpu-0", Type: TypeGPU, GPUUUID: "GPU-0", MemoryBytes: 80 << 30, Shareable: true},
		ShareID: "c3d4", MemoryBytes: 20 << 30, MemoryLimitBytes: 30 << 30, CDIDeviceIDs: []string{"k8s.gpu.gpud.io/claim=uid-f-gpu-0-c3d4"}}}}
	cp.MIGModeOwners["GPU-1"] = "uid-a"
	return cp
}

// TestCheckpointRoundTrip: what this gpud writes it reads back unchanged,
// and the file carries the version and a checksum.
func TestCheckpointRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := testCheckpoint()
	if err := Write(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
	data, _ := os.ReadFile(Path(dir))
	if !strings.Contains(string(data), `"version":3`) || !strings.Contains(string(data), `"checksum":`) ||
		!strings.Contains(string(data), `"memoryLimitBytes":32212254720`) {
		t.Fatalf("checkpoint %s has no version 3, checksum or memory limit", data)
	}
}

// TestCheckpointMigratesV1: a version 1 checkpoint (what the previous gpud
// left) is read, its claims kept, and written back as the latest version.
func TestCheckpointMigratesV1(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(Path(dir), []byte(v1Checkpoint), 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := Read(dir)
	if err != nil {
		t.Fatalf("read v1: %v", err)
	}
	if len(cp.Claims) != 2 || cp.Claims["uid-a"].Devices[0].Device.Name != "gpu-3" || !cp.Claims["uid-b"].Devices[0].Creating {
		t.Fatalf("v1 converted to %+v", cp)
	}
	if err := Write(dir, cp); err != nil {
		t.Fatal(err)
	}
	again, err := Read(dir)
	if err != nil || !reflect.DeepEqual(again, cp) {
		t.Fatalf("v1 → v2 → read = %+v, %v; want %+v", again, err, cp)
	}
}

// TestCheckpointReadsV2: a version 2 checkpoint (before memory limits)
// still loads; its fraction has no limit beyond its request, and it is
// written back as version 3 and read again unchanged.
func TestCheckpointReadsV2(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(Path(dir), []byte(v2Checkpoint), 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := Read(dir)
	if err != nil {
		t.Fatalf("read v2: %v", err)
	}
	d := cp.Claims["uid-f"].Devices
	if len(d) != 1 || d[0].MemoryBytes != 20<<30 || d[0].MemoryLimitBytes != 0 || d[0].LimitBytes() != 20<<30 || !d[0].Fraction() {
		t.Fatalf("v2 fraction read as %+v", d)
	}
	if err := Write(dir, cp); err != nil {
		t.Fatal(err)
	}
	again, err := Read(dir)
	if err != nil || !reflect.DeepEqual(again, cp) {
		t.Fatalf("v2 → v3 → read = %+v, %v; want %+v", again, err, cp)
	}
}

// TestCheckpointRefused: a checkpoint that cannot be trusted is an error
// wrapping ErrCorrupt that names the file, what is wrong and what to do.
func TestCheckpointRefused(t *testing.T) {
	good, err := Encode(testCheckpoint())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, data, want string }{
		{name: "garbage", data: "{not json", want: "not JSON"},
		{name: "no version", data: `{"claims":{}}`, want: "no version"},
		{name: "newer version", data: `{"version":99,"claims":{}}`, want: "version 99 unknown"},
		{name: "null entry v1", data: `{"version":1,"claims":{"u":null}}`, want: `claim "u": null entry`},
		{name: "unknown state v1", data: `{"version":1,"claims":{"u":{"namespace":"n","name":"c","state":"Exploded","devices":[]}}}`, want: `state "Exploded" unknown`},
		{name: "unknown field v1", data: `{"version":1,"claims":{},"extra":1}`, want: "unknown field"},
		{name: "device without name", data: `{"version":1,"claims":{"u":{"namespace":"n","name":"c","state":"Prepared","devices":[{"device":{"type":"gpu"}}]}}}`, want: "has no name"},
		{name: "prepared MIG without UUID", data: `{"version":1,"claims":{"u":{"namespace":"n","name":"c","state":"Prepared","devices":[{"device":{"name":"m","type":"mig","gpuUUID":"G"},"created":true}]}}}`, want: "was not created"},
		{name: "limit in v1", data: `{"version":1,"claims":{"u":{"namespace":"n","name":"c","state":"Prepared","devices":[{"device":{"name":"g","type":"gpu","memoryBytes":100},"memoryBytes":10,"memoryLimitBytes":20}]}}}`, want: "memoryLimitBytes in a version 1 checkpoint"},
		{name: "limit in v2", data: resum(t, strings.Replace(v2Checkpoint, `"coresPercent":25`, `"coresPercent":25,"memoryLimitBytes":32212254720`, 1)), want: "memoryLimitBytes in a version 2 checkpoint"},
		{name: "limit below request", data: resum(t, strings.Replace(string(good), `"memoryLimitBytes":32212254720`, `"memoryLimitBytes":1`, 1)), want: "memory limit 1 bytes outside"},
		{name: "limit above GPU", data: resum(t, strings.Replace(string(good), `"memoryLimitBytes":32212254720`, `"memoryLimitBytes":85899345921`, 1)), want: "memory limit 85899345921 bytes outside"},
		{name: "bad checksum", data: strings.Replace(string(good), `"MIG-1"`, `"MIG-2"`, 1), want: "checksum"},
		{name: "trailing data", data: string(good) + "{}", want: "not JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(Path(dir), []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), Path(dir)) ||
				!strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "move it aside") {
				t.Fatalf("Load = %v, want ErrCorrupt naming %s, %q and what to do", err, Path(dir), tc.want)
			}
		})
	}
}

// resum gives a checkpoint file edited by a test the checksum of its
// new content, so that what the test changed is what gets refused.
func resum(t *testing.T, data string) string {
	t.Helper()
	var f checkpointFileV2
	if err := json.Unmarshal([]byte(data), &f); err != nil {
		t.Fatal(err)
	}
	sum, err := f.sum()
	if err != nil {
		t.Fatal(err)
	}
	f.Checksum = sum
	out, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestCheckpointStaleTempRemoved: the temp file of a write a crash cut
// short is removed when the checkpoint is read; the checkpoint is intact.
func TestCheckpointStaleTempRemoved(t *testing.T) {
	dir, tmp := checkpointWithTemp(t)
	cp, err := Read(dir)
	if err != nil || len(cp.Claims) != 2 {
		t.Fatalf("read = %+v, %v", cp, err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale temp file kept: %v", err)
	}
}

// TestLoadTouchesNothing: a reader beside the running driver
// (device isolation) sees the prepared claims and leaves the temp file of
// a write in flight alone; removing it made the driver's rename fail
// ("write checkpoint: rename ... no such file or directory", seen on the
// real node in issue 22).
func TestLoadTouchesNothing(t *testing.T) {
	dir, tmp := checkpointWithTemp(t)
	cp, err := Load(dir)
	if err != nil || len(cp.Claims) != 2 || cp.Claims["uid-a"].Name != "a" {
		t.Fatalf("Load = %+v, %v", cp, err)
	}
	if _, err := os.Stat(tmp); err != nil {
		t.Fatalf("the temp file of a write in flight was touched: %v", err)
	}
	if cp, err := Load(t.TempDir()); err != nil || len(cp.Claims) != 0 {
		t.Errorf("no checkpoint: %+v, %v; want none, no error", cp, err)
	}
}

// checkpointWithTemp writes testCheckpoint in a new dir, and beside it the
// temp file of a write cut short (or in flight); it returns both paths.
func checkpointWithTemp(t *testing.T) (dir, tmp string) {
	t.Helper()
	dir = t.TempDir()
	if err := Write(dir, testCheckpoint()); err != nil {
		t.Fatal(err)
	}
	tmp = fileio.TempName(Path(dir))
	if err := os.WriteFile(tmp, []byte(`{"version":2,"chec`), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, tmp
}

// FuzzCheckpoint: any bytes either decode to a checkpoint that survives a
// write and read unchanged and whose every entry is usable, or are refused;
// never a panic.
func FuzzCheckpoint(f *testing.F) {
	good, err := Encode(testCheckpoint())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(v1Checkpoint))
	f.Add([]byte(`{"version":1,"claims":{"u":null}}`))
	f.Add([]byte(`{"version":2,"checksum":0,"claims":{}}`))
	f.Add([]byte(v2Checkpoint))
	f.Add([]byte(`{"version":3,"checksum":0,"claims":{"u":{"namespace":"n","name":"c","state":"Prepared","devices":[{"device":{"name":"g","type":"gpu","memoryBytes":100},"memoryBytes":10,"memoryLimitBytes":20}]}}}`))
	f.Add([]byte(`{"version":3,"checksum":0,"claims":{"u":{"namespace":"n","name":"c","state":"Prepared","devices":[{"device":{"name":"m","type":"mig","gpuUUID":"G","migUUID":"M"},"memoryLimitBytes":20}]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cp, err := Decode(data)
		if err != nil {
			return
		}
		for uid, c := range cp.Claims {
			if uid == "" || (c.State != StatePrepared && c.State != StatePreparing) {
				t.Fatalf("accepted claim %q in state %q", uid, c.State)
			}
		}
		enc, err := Encode(cp)
		if err != nil {
			t.Fatalf("encode accepted checkpoint: %v", err)
		}
		again, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-read of a written checkpoint: %v", err)
		}
		if !reflect.DeepEqual(normalize(again), normalize(cp)) {
			t.Fatalf("round trip changed it:\n%+v\n%+v", cp, again)
		}
	})
}

// normalize makes nil and empty slices compare equal (JSON does not keep
// the difference).
func normalize(cp Checkpoint) Checkpoint {
	out := NewCheckpoint()
	maps := func(uid types.UID, c Claim) {
		if len(c.Devices) == 0 {
			c.Devices = nil
		}
		for i := range c.Devices {
			d := &c.Devices[i]
			if len(d.Requests) == 0 {
				d.Requests = nil
			}
			if len(d.CDIDeviceIDs) == 0 {
				d.CDIDeviceIDs = nil
			}
		}
		out.Claims[uid] = c
	}
	for uid, c := range cp.Claims {
		maps(uid, c)
	}
	for g, u := range cp.MIGModeOwners {
		out.MIGModeOwners[g] = u
	}
	return out
}
