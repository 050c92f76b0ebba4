// Package simapi mounts the simulated node's fault hooks on the agent's
// admin API (pkg/adminapi), so that a test or a demo can make a GPU of a
// running `gpud agent --simulate` fail the way the driver reports it: an
// Xid event on the GPU, and for Xid 79 ("fell off the bus") a GPU that is
// lost from then on (every NVML call but its identity answers
// ERROR_GPU_IS_LOST until the agent restarts, as until a reboot). The
// agent's health monitor, telemetry, stream, DRA taints and node taint then
// see exactly what they would see on a real node. And it makes the
// simulated driver allocate and free GPU memory as a process of the node
// (a container's, by its PID): the driver's per-cgroup memory limits,
// pinned MPS limits and borrower evictions then apply to it, and the
// agent's per-process telemetry attributes it to the container, as a CUDA
// program's cudaMalloc would be on a real node.
//
// The routes exist only on a simulated node: cmd/gpud mounts them with
// --simulate and never on NVML. The admin socket's permissions (root and
// the agent's user) apply.
package simapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/simnode"
)

// XidRoute is the route that injects an Xid.
const XidRoute = "/v1/sim/xid"

// MaxXid bounds the Xid numbers accepted (NVIDIA's catalog stays well
// under it).
const MaxXid = 999

// maxGPUBytes bounds the gpu field: a UUID is 40 bytes.
const maxGPUBytes = 64

// XidRequest is the body of POST /v1/sim/xid.
type XidRequest struct {
	// GPU is the GPU's UUID ("GPU-…") or its index ("3").
	GPU string `json:"gpu"`
	// Xid is the Xid number, 1 to MaxXid; 79 makes the GPU fall off the
	// bus (lost for good).
	Xid uint64 `json:"xid"`
}

// XidResponse answers POST /v1/sim/xid: the GPU it reached and whether it
// is now lost.
type XidResponse struct {
	UUID  string `json:"uuid"`
	Index int    `json:"index"`
	Xid   uint64 `json:"xid"`
	Lost  bool   `json:"lost"`
}

// API is the simulated node's fault routes.
type API struct {
	// Node is the simulated node (required).
	Node *simnode.Node
	// Log records each injected fault; nil discards.
	Log *slog.Logger
	// ProcRoot is the /proc the memory routes read a process's cgroup
	// and environment under; empty is /proc.
	ProcRoot string
	// CgroupRoot is the cgroup2 mount the driver names cgroups under;
	// empty: the one in <ProcRoot>/self/mountinfo.
	CgroupRoot string
}

// Routes mounts POST /v1/sim/xid: 200 with an [XidResponse]; 400
// "bad_request" for a malformed body, 400 "invalid" for an Xid out of
// range, 404 "not_found" for a GPU the node lacks. And POST
// /v1/sim/memory/alloc and /v1/sim/memory/free (see [MemoryRequest]).
func (a API) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+XidRoute, a.xid)
	a.memoryRoutes(mux)
}

func (a API) xid(w http.ResponseWriter, r *http.Request) {
	var req XidRequest
	if err := adminapi.DecodeJSON(w, r, &req); err != nil {
		return
	}
	if req.Xid < 1 || req.Xid > MaxXid {
		adminapi.WriteError(w, http.StatusBadRequest, "invalid", fmt.Errorf("xid %d: want 1 to %d (79: the GPU falls off the bus)", req.Xid, MaxXid))
		return
	}
	index, err := a.gpu(req.GPU)
	if err != nil {
		status := http.StatusBadRequest
		code := "invalid"
		if errors.Is(err, simnode.ErrUnknownGPU) {
			status, code = http.StatusNotFound, "not_found"
		}
		adminapi.WriteError(w, status, code, err)
		return
	}
	lost := req.Xid == simnode.XidGPUFallenOffBus
	if lost {
		err = a.Node.FallOffBus(index)
	} else {
		err = a.Node.InjectXid(index, req.Xid)
	}
	if err != nil {
		adminapi.WriteError(w, http.StatusNotFound, "not_found", err)
		return
	}
	uuid := a.Node.Device(index).UUID()
	if a.Log != nil {
		a.Log.Warn("simulated xid injected", "gpu_uuid", uuid, "index", index, "xid", req.Xid, "lost", lost)
	}
	adminapi.WriteJSON(w, http.StatusOK, XidResponse{UUID: uuid, Index: index, Xid: req.Xid, Lost: lost})
}

// gpu resolves a GPU given by UUID or index.
func (a API) gpu(s string) (int, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return 0, errors.New(`gpu is required: a GPU's UUID ("GPU-…") or index ("3")`)
	case len(s) > maxGPUBytes:
		return 0, fmt.Errorf("gpu is %d bytes: want a UUID or an index (at most %d bytes)", len(s), maxGPUBytes)
	}
	i, err := strconv.Atoi(s)
	if err != nil {
		return a.Node.GPUIndex(s)
	}
	if i < 0 || i >= a.Node.GPUs() {
		return 0, fmt.Errorf("%w: index %d (node has %d GPUs)", simnode.ErrUnknownGPU, i, a.Node.GPUs())
	}
	return i, nil
}
