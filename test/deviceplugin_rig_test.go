package test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/deviceplugin"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/test/kubeletstub"
)

// waitTimeout bounds every wait: generous, for a loaded 2-core machine.
const waitTimeout = 60 * time.Second

// rig is a simulated node served by a device plugin manager, with a fake
// kubelet in a short temp dir.
type rig struct {
	node    *simnode.Node
	src     *discovery.Store // the agent's inventory store, health overrides included
	dir     string
	cdiDir  string
	kubelet *kubeletstub.Kubelet
	logs    *logRecorder
}

type rigOption func(*deviceplugin.Config)

// shortDir is a temp dir short enough for unix socket paths.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// startRig serves profile's node. withKubelet false leaves the kubelet
// down (start it with r.startKubelet).
func startRig(t *testing.T, profile string, withKubelet bool, opts ...rigOption) *rig {
	t.Helper()
	r := &rig{node: simnode.NewBuiltin(profile), dir: shortDir(t)}
	r.cdiDir = r.dir + "/cdi"
	r.src = discovery.NewStore(discovery.New(r.node, profile, nil), nil)
	r.rediscover(t)
	if withKubelet {
		r.startKubelet(t)
	}
	cfg := deviceplugin.Config{PluginDir: r.dir, CDIDir: r.cdiDir, RenameShared: true,
		PollInterval: 200 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	r.logs = &logRecorder{}
	log := slog.New(&recordingHandler{rec: r.logs, out: slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})})
	m, err := deviceplugin.New(cfg, r.src, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // runs after the manager stopped (cleanups run last-in first-out)
		if r.kubelet != nil {
			r.kubelet.Stop()
		}
	})
	testwait.Run(t, "device plugin manager", m.Run)
	return r
}

// rediscover rereads the node, as the agent does after a MIG change.
func (r *rig) rediscover(t *testing.T) {
	t.Helper()
	if _, err := r.src.Rediscover(); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) startKubelet(t *testing.T) {
	t.Helper()
	k, err := kubeletstub.Start(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	r.kubelet = k
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// client waits for resource's n-th registration and dials it.
func (r *rig) client(t *testing.T, resource string, n int) *kubeletstub.Client {
	t.Helper()
	reg, err := r.kubelet.WaitRegistered(ctxT(t), resource, n)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubeletstub.Dial(ctxT(t), r.dir, reg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// watch starts ListAndWatch and waits for a list that satisfies ok.
func watch(t *testing.T, c *kubeletstub.Client) *kubeletstub.Watch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := c.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (r *rig) uuid(i int) string { return r.node.Device(i).UUID() }

// enableMIG turns MIG on for GPU index and creates count instances of a
// GPU-instance profile (nvml.GPU_INSTANCE_PROFILE_*), each with one
// compute instance using all of its slices.
func enableMIG(t *testing.T, n *simnode.Node, index, profile, ciProfile, count int) {
	t.Helper()
	d := n.Device(index)
	if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret == nvml.ERROR_RESET_REQUIRED {
		if err := n.ResetGPU(index); err != nil {
			t.Fatal(err)
		}
	} else if ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}
	info, ret := d.GetGpuInstanceProfileInfo(profile)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetGpuInstanceProfileInfo: %v", ret)
	}
	for range count {
		gi, ret := d.CreateGpuInstance(&info)
		if ret != nvml.SUCCESS {
			t.Fatalf("CreateGpuInstance: %v", ret)
		}
		ci, ret := gi.GetComputeInstanceProfileInfo(ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			t.Fatalf("GetComputeInstanceProfileInfo: %v", ret)
		}
		if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
			t.Fatalf("CreateComputeInstance: %v", ret)
		}
	}
}

// logRecorder keeps the messages a rig's components logged, at every
// level, so a test can wait on what the code under test did.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

// count returns how many records had a message starting with prefix.
func (l *logRecorder) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// recordingHandler records every record's message and passes the ones out
// takes on to it.
type recordingHandler struct {
	rec *logRecorder
	out slog.Handler
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordingHandler) Handle(ctx context.Context, r slog.Record) error {
	h.rec.mu.Lock()
	h.rec.msgs = append(h.rec.msgs, r.Message)
	h.rec.mu.Unlock()
	if h.out.Enabled(ctx, r.Level) {
		return h.out.Handle(ctx, r)
	}
	return nil
}

func (h *recordingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordingHandler{rec: h.rec, out: h.out.WithAttrs(as)}
}

func (h *recordingHandler) WithGroup(name string) slog.Handler {
	return &recordingHandler{rec: h.rec, out: h.out.WithGroup(name)}
}
