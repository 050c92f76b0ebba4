package simapi

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/containerd/cgroups/v3"

	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/cgroupfs"
	"github.com/gpud/gpud/pkg/simnode"
)

// The routes that make the simulated driver allocate and free GPU memory
// as a process of the node.
const (
	AllocRoute = "/v1/sim/memory/alloc"
	FreeRoute  = "/v1/sim/memory/free"
)

// Bounds of a memory request.
const (
	// MaxPID is Linux's highest pid_max (PID_MAX_LIMIT on 64-bit).
	MaxPID = 1 << 22
	// MaxBytes bounds one allocation or free: 1 TiB, above any GPU's
	// memory.
	MaxBytes = 1 << 40
	// maxEnvironBytes bounds what is read of a process's environment.
	maxEnvironBytes = 1 << 20
)

// MemoryRequest is the body of POST /v1/sim/memory/alloc and
// /v1/sim/memory/free.
type MemoryRequest struct {
	// GPU is the GPU's UUID ("GPU-…") or its index ("3").
	GPU string `json:"gpu"`
	// PID is a running process of the node as the agent sees it (the
	// host's PID of a container's process, from `crictl inspect` or
	// `ctr tasks ls`): the simulated allocation is that process's, in
	// its cgroup (read from /proc/<pid>/cgroup, so the driver's
	// per-cgroup limits on it apply) and with its CUDA_MPS_* environment
	// (read from /proc/<pid>/environ, as CUDA reads it at start).
	PID uint32 `json:"pid"`
	// Bytes is how much to allocate (1 to MaxBytes), or to free (0: all,
	// ending the process's use of the GPU).
	Bytes uint64 `json:"bytes"`
}

// MemoryResponse is the driver's answer.
type MemoryResponse struct {
	UUID  string `json:"uuid"`
	Index int    `json:"index"`
	PID   uint32 `json:"pid"`
	// Cgroup is the process's cgroup2 directory, the namespace of the
	// driver's memory limits (alloc only); "" on a node without cgroup v2.
	Cgroup string `json:"cgroup"`
	// Result is the NVML return code: "SUCCESS", or the driver's refusal
	// ("ERROR_MEMORY": past the cgroup's hard limit, the pinned MPS
	// limit or the GPU's free memory; nothing was allocated); Error
	// says why.
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
	// HeldBytes is what the process holds on the GPU after the call.
	HeldBytes uint64 `json:"heldBytes"`
}

// memoryRoutes mounts the allocation routes: 200 with a [MemoryResponse]
// (the driver's refusals included), 400 "bad_request" for a malformed
// body, 400 "invalid" for a value out of range, 404 "not_found" for a GPU
// the node lacks, (alloc) a PID with no process, or (free) a PID without
// simulated memory on the GPU (its process need not run any more).
func (a API) memoryRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+AllocRoute, func(w http.ResponseWriter, r *http.Request) { a.memory(w, r, true) })
	mux.HandleFunc("POST "+FreeRoute, func(w http.ResponseWriter, r *http.Request) { a.memory(w, r, false) })
}

func (a API) memory(w http.ResponseWriter, r *http.Request, alloc bool) {
	var req MemoryRequest
	if err := adminapi.DecodeJSON(w, r, &req); err != nil {
		return
	}
	if err := req.validate(alloc); err != nil {
		adminapi.WriteError(w, http.StatusBadRequest, "invalid", err)
		return
	}
	index, err := a.gpu(req.GPU)
	if err != nil {
		status, code := http.StatusBadRequest, "invalid"
		if errors.Is(err, simnode.ErrUnknownGPU) {
			status, code = http.StatusNotFound, "not_found"
		}
		adminapi.WriteError(w, status, code, err)
		return
	}
	resp := MemoryResponse{UUID: a.Node.Device(index).UUID(), Index: index, PID: req.PID}
	var callErr error // the driver's answer
	if alloc {
		proc, err := a.process(req.PID)
		if err != nil {
			status, code := http.StatusBadRequest, "invalid"
			if errors.Is(err, fs.ErrNotExist) {
				status, code = http.StatusNotFound, "not_found"
			}
			adminapi.WriteError(w, status, code, err)
			return
		}
		resp.Cgroup = proc.Cgroup
		callErr = a.Node.AllocateOn(index, proc, req.Bytes)
	} else {
		if _, ok := a.Node.ProcessMemory(index, req.PID); !ok {
			adminapi.WriteError(w, http.StatusNotFound, "not_found", fmt.Errorf("pid %d holds no simulated memory on GPU %d (allocate first)", req.PID, index))
			return
		}
		_, callErr = a.Node.Free(index, req.PID, req.Bytes)
	}
	resp.HeldBytes, _ = a.Node.ProcessMemory(index, req.PID)
	resp.Result = nvml.SUCCESS.Error()
	if callErr != nil {
		var ret nvml.Return
		if !errors.As(callErr, &ret) {
			ret = nvml.ERROR_UNKNOWN
		}
		resp.Result, resp.Error = ret.Error(), callErr.Error()
	}
	if a.Log != nil {
		a.Log.Info("simulated gpu memory call", "alloc", alloc, "gpu_uuid", resp.UUID, "pid", req.PID, "cgroup", resp.Cgroup,
			"bytes", req.Bytes, "result", resp.Result, "held_bytes", resp.HeldBytes)
	}
	adminapi.WriteJSON(w, http.StatusOK, resp)
}

// validate checks the request's ranges; the GPU is resolved apart.
func (q MemoryRequest) validate(alloc bool) error {
	var errs []error
	if q.PID < 1 || q.PID > MaxPID {
		errs = append(errs, fmt.Errorf("pid %d: want a running process's PID, 1 to %d", q.PID, MaxPID))
	}
	switch {
	case alloc && q.Bytes == 0:
		errs = append(errs, errors.New("bytes 0: want how much to allocate, 1 to 1 TiB"))
	case q.Bytes > MaxBytes:
		errs = append(errs, fmt.Errorf("bytes %d: want at most %d (1 TiB)", q.Bytes, uint64(MaxBytes)))
	}
	return errors.Join(errs...)
}

// process is the simulated process for the node's process pid: its
// cgroup under the cgroup2 mount and its CUDA_MPS_* environment, the
// pipe directory resolved in the process's own root. The error wraps
// fs.ErrNotExist when no such process runs.
func (a API) process(pid uint32) (simnode.ProcessSpec, error) {
	root := a.ProcRoot
	if root == "" {
		root = "/proc"
	}
	dir := filepath.Join(root, strconv.FormatUint(uint64(pid), 10))
	spec := simnode.ProcessSpec{PID: pid}
	f, err := os.Open(filepath.Join(dir, "cgroup"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return spec, fmt.Errorf("pid %d: no such process under %s (want a running process's host PID): %w", pid, root, err)
	case err != nil:
		return spec, fmt.Errorf("pid %d: read its cgroup: %w", pid, err)
	}
	_, unified, err := cgroups.ParseCgroupFromReaderUnified(f)
	f.Close()
	if err != nil {
		return spec, fmt.Errorf("pid %d: read its cgroup: %w", pid, err)
	}
	if mount := a.cgroupRoot(root); mount != "" && unified != "" {
		spec.Cgroup = filepath.Join(mount, filepath.Clean("/"+unified))
	}
	env, err := readEnviron(filepath.Join(dir, "environ"))
	if err != nil {
		return spec, fmt.Errorf("pid %d: read its environment: %w", pid, err)
	}
	if len(env) > 0 {
		if d, ok := env[simnode.EnvMPSPipeDirectory]; ok && filepath.IsAbs(d) {
			env[simnode.EnvMPSPipeDirectory] = filepath.Join(dir, "root", d)
		}
		spec.Env = env
	}
	return spec, nil
}

// cgroupRoot is the cgroup2 mount: CgroupRoot, else the one in the
// agent's <proc>/self/mountinfo; "" when there is none.
func (a API) cgroupRoot(proc string) string {
	if a.CgroupRoot != "" {
		return a.CgroupRoot
	}
	f, err := os.Open(filepath.Join(proc, "self", "mountinfo"))
	if err != nil {
		return ""
	}
	defer f.Close()
	m, err := cgroupfs.Parse(f)
	if err != nil {
		return ""
	}
	return m.Unified
}

// readEnviron reads a /proc/<pid>/environ and keeps the CUDA_MPS_*
// variables, the ones CUDA reads to become an MPS client and take its
// limits.
func readEnviron(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxEnvironBytes))
	if err != nil {
		return nil, err
	}
	return parseEnviron(data), nil
}

// parseEnviron splits NUL-separated KEY=VALUE pairs and keeps those whose
// key starts with CUDA_MPS_; nil when there are none.
func parseEnviron(data []byte) map[string]string {
	var env map[string]string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxEnvironBytes+1)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, 0); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok || !strings.HasPrefix(k, "CUDA_MPS_") {
			continue
		}
		if env == nil {
			env = map[string]string{}
		}
		env[k] = v
	}
	return env
}
