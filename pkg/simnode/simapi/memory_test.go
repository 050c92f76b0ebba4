package simapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/simnode"
)

const gib = uint64(1) << 30

// memNode is a simulated r615 dgx-h100 with a fake /proc and cgroup2
// mount: one container cgroup per name, its process pid 1000+i.
type memNode struct {
	n          *simnode.Node
	api        API
	cgroups    map[string]string // container -> cgroup path
	pids       map[string]uint32
	procRoot   string
	cgroupRoot string
}

func newMemNode(t testing.TB, containers ...string) *memNode {
	t.Helper()
	n := simnode.NewBuiltin("dgx-h100", simnode.WithDriverVersion("615.40.01"))
	t.Cleanup(n.Close)
	base := t.TempDir()
	m := &memNode{n: n, cgroups: map[string]string{}, pids: map[string]uint32{},
		procRoot: filepath.Join(base, "proc"), cgroupRoot: filepath.Join(base, "cgroup")}
	m.api = API{Node: n, ProcRoot: m.procRoot, CgroupRoot: m.cgroupRoot}
	for i, c := range containers {
		rel := "/kubepods.slice/pod-" + c + "/cri-containerd-" + c + ".scope"
		m.cgroups[c] = filepath.Join(m.cgroupRoot, rel)
		pid := uint32(1000 + i)
		m.pids[c] = pid
		dir := filepath.Join(m.procRoot, strconv.Itoa(int(pid)))
		for _, d := range []string{m.cgroups[c], dir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("0::"+rel+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "environ"), []byte("PATH=/bin\x00HOME=/\x00"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// limit sets container c's driver limits on GPU index.
func (m *memNode) limit(t *testing.T, index int, c string, soft, hard uint64) {
	t.Helper()
	dev, _ := m.n.DeviceGetHandleByIndex(index)
	if ret := dev.SetMemoryLimits_v1(m.cgroups[c], soft, hard); ret != nvml.SUCCESS {
		t.Fatalf("SetMemoryLimits_v1(%s, %d, %d): %v", c, soft, hard, ret)
	}
}

func (m *memNode) call(t testing.TB, route, body string) *httptest.ResponseRecorder {
	t.Helper()
	mux := http.NewServeMux()
	m.api.Routes(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, route, strings.NewReader(body)))
	return rec
}

// mem posts a MemoryRequest for container c's process and returns the
// driver's answer.
func (m *memNode) mem(t *testing.T, route string, gpu int, c string, bytes uint64) MemoryResponse {
	t.Helper()
	body, _ := json.Marshal(MemoryRequest{GPU: strconv.Itoa(gpu), PID: m.pids[c], Bytes: bytes})
	rec := m.call(t, route, string(body))
	if rec.Code != http.StatusOK {
		t.Fatalf("%s %s: status %d: %s", route, body, rec.Code, rec.Body)
	}
	var got MemoryResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	return got
}

// procMemory is what NVML's process list says each PID holds on GPU
// index.
func procMemory(t *testing.T, n *simnode.Node, index int) map[uint32]uint64 {
	t.Helper()
	dev, _ := n.DeviceGetHandleByIndex(index)
	ps, ret := dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	out := map[uint32]uint64{}
	for _, p := range ps {
		out[p.Pid] = p.UsedGpuMemory
	}
	return out
}

// TestAllocAsContainerProcess: a container's process allocating through
// the route is charged to its cgroup: 12 GiB into a 10 GiB hard limit
// fails with the driver's ERROR_MEMORY and allocates nothing, 9 GiB
// works, 2 GiB more fails again; CUDA_MPS_* in its environment change
// nothing; the neighbour on the GPU keeps its 16 GiB; NVML lists both
// processes with what they hold, and a free ends the process's use.
func TestAllocAsContainerProcess(t *testing.T) {
	m := newMemNode(t, "limited", "neighbour")
	env := "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G\x00CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps\x00"
	if err := os.WriteFile(filepath.Join(m.procRoot, "1000", "environ"), []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	m.limit(t, 3, "limited", 8*gib, 10*gib)
	m.limit(t, 3, "neighbour", 20*gib, 20*gib)

	if got := m.mem(t, AllocRoute, 3, "neighbour", 16*gib); got.Result != "SUCCESS" || got.HeldBytes != 16*gib || got.Cgroup != m.cgroups["neighbour"] {
		t.Fatalf("neighbour allocates 16 GiB: %+v, want SUCCESS holding 16 GiB in cgroup %s", got, m.cgroups["neighbour"])
	}
	got := m.mem(t, AllocRoute, 3, "limited", 12*gib)
	if got.Result != "ERROR_MEMORY" || got.HeldBytes != 0 || !strings.Contains(got.Error, "hard limit") {
		t.Fatalf("12 GiB into a 10 GiB limit: %+v, want ERROR_MEMORY naming the hard limit, nothing held", got)
	}
	if got := m.mem(t, AllocRoute, 3, "limited", 9*gib); got.Result != "SUCCESS" || got.HeldBytes != 9*gib {
		t.Fatalf("9 GiB within the limit: %+v", got)
	}
	if got := m.mem(t, AllocRoute, 3, "limited", 2*gib); got.Result != "ERROR_MEMORY" || got.HeldBytes != 9*gib {
		t.Fatalf("2 GiB more (11 GiB): %+v, want ERROR_MEMORY, 9 GiB still held", got)
	}
	want := map[uint32]uint64{1000: 9 * gib, 1001: 16 * gib}
	if ps := procMemory(t, m.n, 3); len(ps) != 2 || ps[1000] != want[1000] || ps[1001] != want[1001] {
		t.Fatalf("NVML processes on GPU 3: %v, want %v", ps, want)
	}
	if got := m.mem(t, FreeRoute, 3, "limited", 4*gib); got.Result != "SUCCESS" || got.HeldBytes != 5*gib {
		t.Fatalf("free 4 GiB: %+v, want 5 GiB left", got)
	}
	if got := m.mem(t, FreeRoute, 3, "limited", 0); got.Result != "SUCCESS" || got.HeldBytes != 0 {
		t.Fatalf("free all: %+v", got)
	}
	if ps := procMemory(t, m.n, 3); len(ps) != 1 || ps[1001] != 16*gib {
		t.Fatalf("NVML processes on GPU 3 after the free: %v, want only the neighbour's 16 GiB", ps)
	}
}

// TestAllocEvictsBorrower: on a full GPU, a container within its soft
// limit gets the memory a borrower (above its soft limit) holds: the
// driver kills the borrower's process, as the route reports.
func TestAllocEvictsBorrower(t *testing.T) {
	m := newMemNode(t, "borrower", "owner")
	m.limit(t, 4, "borrower", 20*gib, 80*gib)
	m.limit(t, 4, "owner", 40*gib, 40*gib)
	if got := m.mem(t, AllocRoute, 4, "borrower", 70*gib); got.Result != "SUCCESS" {
		t.Fatalf("borrower allocates 70 GiB (limit 80): %+v", got)
	}
	if got := m.mem(t, AllocRoute, 4, "owner", 40*gib); got.Result != "SUCCESS" || got.HeldBytes != 40*gib {
		t.Fatalf("owner claims its 40 GiB: %+v, want SUCCESS", got)
	}
	ev := m.n.Evictions()
	if len(ev) != 1 || ev[0].PID != m.pids["borrower"] || ev[0].Bytes != 70*gib || ev[0].Cgroup != m.cgroups["borrower"] {
		t.Fatalf("evictions %+v, want the borrower's process (pid %d, 70 GiB)", ev, m.pids["borrower"])
	}
	if held, ok := m.n.ProcessMemory(4, m.pids["borrower"]); ok {
		t.Fatalf("borrower still holds %d bytes after its eviction", held)
	}
}

// TestMemoryRefusals: a bad request allocates nothing and says what is
// wrong.
func TestMemoryRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, route, body, code, msg string
		status                       int
	}{
		{"pid 0", AllocRoute, `{"gpu":"1","pid":0,"bytes":1}`, "invalid", "pid 0: want a running process's PID", 400},
		{"pid past pid_max", AllocRoute, `{"gpu":"1","pid":4194305,"bytes":1}`, "invalid", "pid 4194305", 400},
		{"alloc 0 bytes", AllocRoute, `{"gpu":"1","pid":1000,"bytes":0}`, "invalid", "bytes 0", 400},
		{"more than 1 TiB", AllocRoute, `{"gpu":"1","pid":1000,"bytes":1099511627777}`, "invalid", "at most 1099511627776", 400},
		{"no such process", AllocRoute, `{"gpu":"1","pid":4242,"bytes":1}`, "not_found", "pid 4242: no such process", 404},
		{"unknown gpu", AllocRoute, `{"gpu":"GPU-nope","pid":1000,"bytes":1}`, "not_found", `"GPU-nope"`, 404},
		{"no gpu", AllocRoute, `{"pid":1000,"bytes":1}`, "invalid", "gpu is required", 400},
		{"unknown field", AllocRoute, `{"gpu":"1","pid":1000,"bytes":1,"container":"x"}`, "bad_request", "unknown field", 400},
		{"negative bytes", AllocRoute, `{"gpu":"1","pid":1000,"bytes":-1}`, "bad_request", "bytes", 400},
		{"free without memory", FreeRoute, `{"gpu":"1","pid":1000}`, "not_found", "pid 1000 holds no simulated memory on GPU 1", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMemNode(t, "c")
			rec := m.call(t, tc.route, tc.body)
			var e adminapi.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatalf("status %d, body %s: %v", rec.Code, rec.Body, err)
			}
			if rec.Code != tc.status || e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("status %d code %q message %q, want %d %q containing %q", rec.Code, e.Code, e.Message, tc.status, tc.code, tc.msg)
			}
			if ps := procMemory(t, m.n, 1); len(ps) != 0 {
				t.Errorf("refused request left processes %v", ps)
			}
		})
	}
}

func TestParseEnviron(t *testing.T) {
	got := parseEnviron([]byte("PATH=/bin\x00CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50\x00CUDA_VISIBLE_DEVICES=0\x00CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8G"))
	want := map[string]string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8G"}
	if len(got) != len(want) || got["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "50" || got["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=8G" {
		t.Fatalf("parseEnviron = %v, want %v", got, want)
	}
	if got := parseEnviron([]byte("PATH=/bin\x00\x00")); got != nil {
		t.Fatalf("no CUDA_MPS_ variables: %v, want nil", got)
	}
}

// FuzzMemoryBody: any body to either route gets 200, 400, 404 or 413
// with a JSON answer, never a panic.
func FuzzMemoryBody(f *testing.F) {
	for _, s := range []string{`{"gpu":"3","pid":1000,"bytes":1073741824}`, `{"gpu":"GPU-x","pid":1,"bytes":1}`, `{"gpu":"0","pid":1000}`, `{}`, `[`, `{"gpu":" 7 ","pid":4194304,"bytes":1099511627776}`} {
		f.Add(s, true)
		f.Add(s, false)
	}
	m := newMemNode(f, "c")
	f.Fuzz(func(t *testing.T, body string, alloc bool) {
		route := FreeRoute
		if alloc {
			route = AllocRoute
		}
		rec := m.call(t, route, body)
		switch rec.Code {
		case 200, 400, 404, 413:
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		var v map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("answer %q to %q is not JSON: %v", rec.Body, body, err)
		}
	})
}

// FuzzParseEnviron: any environ block parses without a panic, and only
// CUDA_MPS_ variables come back.
func FuzzParseEnviron(f *testing.F) {
	f.Add([]byte("A=1\x00CUDA_MPS_PIPE_DIRECTORY=/x\x00"))
	f.Add([]byte("\x00\x00="))
	f.Fuzz(func(t *testing.T, data []byte) {
		for k := range parseEnviron(data) {
			if !strings.HasPrefix(k, "CUDA_MPS_") {
				t.Fatalf("kept %q", k)
			}
		}
	})
}
