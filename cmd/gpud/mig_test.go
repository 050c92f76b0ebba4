package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/mig/migcli"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/test/kubeletstub"
)

const cliLayouts = `version: v1
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

// migCLIRig is a simulated A100 node kept in a state file, so successive
// `gpud mig` runs see one node, with GPU 0 split into two 3g.20gb slices.
type migCLIRig struct {
	dir, layouts, state string
	slice               string // the UUID of one 3g.20gb slice
}

func newMigCLIRig(t *testing.T) *migCLIRig {
	t.Helper()
	r := &migCLIRig{dir: t.TempDir()}
	r.layouts, r.state = filepath.Join(r.dir, "layouts.yaml"), filepath.Join(r.dir, "node.json")
	if err := os.WriteFile(r.layouts, []byte(cliLayouts), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.mig(t, "apply", "-c", "two-3g", "--reset-gpus"); err != nil {
		t.Fatalf("set up two 3g.20gb slices: %v", err)
	}
	st := r.show(t)
	if len(st.GPUs[0].Instances) != 2 {
		t.Fatalf("gpu 0 has %d instances after setup, want 2", len(st.GPUs[0].Instances))
	}
	r.slice = st.GPUs[0].Instances[1].UUIDs()[0]
	return r
}

// mig runs `gpud mig SUB` on the rig's node with extra flags.
func (r *migCLIRig) mig(t *testing.T, sub string, extra ...string) (string, error) {
	t.Helper()
	args := append([]string{"mig", sub, "--simulate", "dgx-a100", "--sim-state-file", r.state, "-f", r.layouts,
		"--admin-socket", filepath.Join(r.dir, "admin.sock"), "--pod-resources-socket", filepath.Join(r.dir, "none.sock")}, extra...)
	var out bytes.Buffer
	err := run(t.Context(), args, &out, io.Discard)
	return out.String(), err
}

func (r *migCLIRig) show(t *testing.T) mig.State {
	t.Helper()
	var out bytes.Buffer
	if err := run(t.Context(), []string{"mig", "show", "--simulate", "dgx-a100", "--sim-state-file", r.state, "-o", "json"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var st mig.State
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestMigCLIKeepsAllocatedSlice: without an agent, `gpud mig apply` must
// count a slice the kubelet allocated to a pod as busy even when no
// process runs on it, as the agent does.
func TestMigCLIKeepsAllocatedSlice(t *testing.T) {
	r := newMigCLIRig(t)
	kubelet, err := kubeletstub.StartPodResources(&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{
		Name: "train-1", Namespace: "ml",
		Containers: []*podresourcesv1.ContainerResources{{Name: "main", Devices: []*podresourcesv1.ContainerDevices{{
			ResourceName: "nvidia.com/mig-3g.20gb", DeviceIds: []string{r.slice},
		}}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer kubelet.Stop()
	for _, sub := range []string{"plan", "apply"} {
		_, err := r.mig(t, sub, "-c", "seven-1g", "--pod-resources-socket", kubelet.Socket())
		if !errors.Is(err, mig.ErrBusy) || !strings.Contains(err.Error(), "ml/train-1") || !strings.Contains(err.Error(), r.slice) {
			t.Fatalf("mig %s over an allocated slice = %v, want a busy error naming ml/train-1 and %s", sub, err, r.slice)
		}
	}
	if got := r.show(t).GPUs[0].Instances; len(got) != 2 || got[1].UUIDs()[0] != r.slice {
		t.Fatalf("gpu 0 after the refused apply: %v, want the two 3g.20gb slices untouched", got)
	}
	if _, err := r.mig(t, "apply", "-c", "seven-1g", "--pod-resources-socket", kubelet.Socket(), "--force"); err != nil {
		t.Fatalf("mig apply --force: %v", err)
	}
	if got := r.show(t).GPUs[0].Instances; len(got) != 7 {
		t.Fatalf("gpu 0 after apply --force has %d instances, want 7", len(got))
	}
}

// TestMigCLIKubeletNotAnswering: a PodResources socket that exists but
// does not answer means nobody can tell which slices are allocated, so a
// plan that destroys slices is refused unless --force.
func TestMigCLIKubeletNotAnswering(t *testing.T) {
	r := newMigCLIRig(t)
	dead := filepath.Join(r.dir, "dead.sock")
	if err := os.WriteFile(dead, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := r.mig(t, "apply", "-c", "seven-1g", "--pod-resources-socket", dead)
	if !errors.Is(err, mig.ErrBusyUnknown) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("mig apply with a dead kubelet = %v, want ErrBusyUnknown suggesting --force", err)
	}
	if got := r.show(t).GPUs[0].Instances; len(got) != 2 {
		t.Fatalf("gpu 0 has %d instances after the refused apply, want 2", len(got))
	}
	// A plan that destroys nothing needs no allocation check.
	if _, err := r.mig(t, "apply", "-c", "two-3g", "--pod-resources-socket", dead); err != nil {
		t.Fatalf("an apply that changes nothing was refused: %v", err)
	}
}

// fakeAgent serves the admin socket with handler.
func fakeAgent(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

func writeLayouts(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "layouts.yaml")
	if err := os.WriteFile(p, []byte(cliLayouts), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMigCLIAgentDiesMidRequest: an agent that closes the connection
// mid-request gets a message saying what happened and what to check, not
// `Post "http://gpud/v1/mig/apply": EOF`, and no NVML fallback.
func TestMigCLIAgentDiesMidRequest(t *testing.T) {
	sock := fakeAgent(t, func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	var stderr bytes.Buffer
	err := run(t.Context(), []string{"mig", "apply", "-f", writeLayouts(t), "-c", "two-3g", "--admin-socket", sock}, io.Discard, &stderr)
	if err == nil {
		t.Fatal("apply succeeded though the agent closed the connection")
	}
	msg := err.Error()
	for _, want := range []string{"closed the connection mid-request", "check its log", "may or may not be applied", "gpud mig show", "gpud mig plan"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, `Post "http://gpud`) || strings.Contains(msg, "NVML") || strings.Contains(stderr.String(), "NVML") {
		t.Errorf("error %q (stderr %q): want no raw HTTP error and no NVML fallback", msg, stderr.String())
	}
}

// TestMigCLIAgentErrorNoFallback: an agent that answers with an error (a
// shutting-down agent, say) is reported as is; only a socket nobody
// listens on falls back to NVML.
func TestMigCLIAgentErrorNoFallback(t *testing.T) {
	sock := fakeAgent(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":503,"error":"agent shutting down"}`))
	})
	var stderr bytes.Buffer
	err := run(t.Context(), []string{"mig", "apply", "-f", writeLayouts(t), "-c", "two-3g", "--admin-socket", sock}, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "agent shutting down") || strings.Contains(err.Error(), "NVML") {
		t.Fatalf("apply against an agent answering 503 = %v, want its error and no NVML fallback", err)
	}
	if stderr.Len() > 0 {
		t.Errorf("stderr %q: want nothing (no fallback note)", stderr.String())
	}
}

func TestMigCLINoAgentFallsBackToNVML(t *testing.T) {
	if ret := nvml.New().Init(); ret == nvml.SUCCESS {
		t.Skip("NVML is installed here: the fallback would change the GPUs")
	}
	dir := t.TempDir()
	var stderr bytes.Buffer
	err := run(t.Context(), []string{"mig", "plan", "-f", writeLayouts(t), "-c", "two-3g", "--admin-socket", filepath.Join(dir, "admin.sock")}, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "NVML") {
		t.Fatalf("plan without agent or NVML = %v, want the NVML error", err)
	}
	if !strings.Contains(stderr.String(), "no agent listening on "+filepath.Join(dir, "admin.sock")) {
		t.Errorf("stderr %q: want a note that no agent listens and NVML is used", stderr.String())
	}
}

// TestMigCLIStateFileNotWritten: `gpud mig apply --simulate` whose
// --sim-state-file cannot be written at all (its parent is a regular
// file: tests may run as root, who writes into read-only directories)
// fails instead of printing "Applied" for a layout that is gone when it
// exits. pkg/mig/migcli tests writes that start failing after the node
// was opened.
func TestMigCLIStateFileNotWritten(t *testing.T) {
	dir := t.TempDir()
	layouts := writeLayouts(t)
	parent := filepath.Join(dir, "file")
	if err := os.WriteFile(parent, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run(t.Context(), []string{"mig", "apply", "--simulate", "dgx-a100", "--sim-state-file", filepath.Join(parent, "node.json"),
		"-f", layouts, "-c", "two-3g", "--pod-resources-socket", ""}, &out, io.Discard)
	if err == nil || out.Len() > 0 {
		t.Fatalf("apply with an unwritable state file = %v, printed %q; want an error and nothing printed", err, out.String())
	}
}

// TestMigCLIBinaryLayout: a binary file given as a layout is refused
// without echoing its bytes raw.
func TestMigCLIBinaryLayout(t *testing.T) {
	p := filepath.Join(t.TempDir(), "layouts.bin")
	data := append([]byte("version: v1\nmig-configs:\n  a: \x00\x01\x02\x1b[31m"), bytes.Repeat([]byte{0xff, 0xfe, 0x00}, 5000)...)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(t.Context(), []string{"mig", "plan", "--simulate", "dgx-a100", "-f", p, "-c", "a"}, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("a binary layout file was accepted")
	}
	if msg := err.Error(); strings.ContainsAny(msg, "\x00\x01\x1b") || !utf8.ValidString(msg) || len(msg) > 2000 {
		t.Fatalf("error carries raw bytes or is huge (%d bytes): %q", len(msg), msg)
	}
}

// refusingSocket leaves a socket file nobody accepts on, as an agent that
// stopped listening (shutting down, or crashed) does.
func refusingSocket(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	return sock
}

// TestMigCLIWaitsForAShuttingDownAgent: a socket that refuses connections
// may belong to an agent finishing an apply; the CLI waits for it to go
// away (or answer) before it touches NVML, and says so.
func TestMigCLIWaitsForAShuttingDownAgent(t *testing.T) {
	if ret := nvml.New().Init(); ret == nvml.SUCCESS {
		t.Skip("NVML is installed here: the fallback would change the GPUs")
	}
	sock := refusingSocket(t)
	removed := make(chan time.Time, 1)
	go func() {
		time.Sleep(300 * time.Millisecond) // the agent's shutdown ends
		removed <- time.Now()
		_ = os.Remove(sock)
	}()
	var stderr bytes.Buffer
	err := run(t.Context(), []string{"mig", "plan", "-f", writeLayouts(t), "-c", "two-3g", "--admin-socket", sock}, io.Discard, &stderr)
	fellBack := time.Now()
	if err == nil || !strings.Contains(err.Error(), "NVML") {
		t.Fatalf("plan = %v, want the NVML error of the fallback", err)
	}
	if at := <-removed; fellBack.Before(at) {
		t.Fatal("fell back to NVML before the agent's socket went away")
	}
	if !strings.Contains(stderr.String(), "nobody accepts on it") || !strings.Contains(stderr.String(), "using NVML directly") {
		t.Errorf("stderr %q: want the wait and the fallback said", stderr.String())
	}
}

func TestMigCLIStaleSocket(t *testing.T) {
	if ret := nvml.New().Init(); ret == nvml.SUCCESS {
		t.Skip("NVML is installed here: the fallback would change the GPUs")
	}
	var stderr bytes.Buffer
	c, err := parseMigArgs([]string{"plan", "-f", writeLayouts(t), "-c", "two-3g", "--admin-socket", refusingSocket(t)}, io.Discard, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	c.AgentGoneWait = 300 * time.Millisecond
	err = migcli.Run(t.Context(), c, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "NVML") || !strings.Contains(stderr.String(), "stale socket") {
		t.Fatalf("plan = %v (stderr %q), want a stale-socket note and the NVML fallback", err, stderr.String())
	}
}

// killApply kills `gpud mig apply --journal` of layout in the middle (its
// 2nd GPU instance creation stalls, the files are copied as a SIGKILL
// leaves them, the stalled process is ended and the copies put back): the
// rig's state file holds a half-applied layout and journal the apply's
// journal, with a temp file a killed journal write would leave.
func killApply(t *testing.T, r *migCLIRig, journal, layout string) {
	t.Helper()
	n := simnode.NewBuiltin("dgx-a100", simnode.WithStateFile(r.state))
	stalled := make(chan struct{}, 1)
	n.InjectFault("CreateGpuInstance", simnode.FaultSpec{After: 1, Delay: time.Hour, Hit: stalled})
	svc, err := migcli.NewService(n, n, journal, true, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := mig.ParseLayoutFile([]byte(cliLayouts))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = svc.Apply(t.Context(), f, layout, false)
	}()
	<-stalled
	state, err := os.ReadFile(r.state)
	if err != nil {
		t.Fatal(err)
	}
	jdata, err := os.ReadFile(journal)
	if err != nil {
		t.Fatalf("no journal while the apply runs: %v", err)
	}
	n.Close()
	<-done
	for path, data := range map[string][]byte{r.state: state, journal: jdata, fileio.TempName(journal): []byte(`{"ver`)} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMigCLIInterruptedApply: after `gpud mig apply --journal` was killed,
// `gpud mig show` says the layout is half-applied and how to finish or
// roll it back; apply refuses to start over the journal (its rollback
// target would be lost); recover --rollback restores the layout before,
// recover finishes it, and neither leaves the journal or its temp file.
func TestMigCLIInterruptedApply(t *testing.T) {
	r := newMigCLIRig(t)
	journal := filepath.Join(r.dir, "mig-journal.json")
	killApply(t, r, journal, "seven-1g")

	out := r.showText(t, "--journal", journal)
	for _, want := range []string{`INTERRUPTED: an apply of layout "seven-1g"`, "GPUs 0 may be half-applied",
		"gpud mig recover --journal " + journal, "gpud mig recover --rollback --journal " + journal} {
		if !strings.Contains(out, want) {
			t.Errorf("mig show lacks %q:\n%s", want, out)
		}
	}
	var js migcli.ShowJSON
	if err := run(t.Context(), []string{"mig", "show", "--simulate", "dgx-a100", "--sim-state-file", r.state, "--journal", journal, "-o", "json"}, &jsonBuf{&js}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if js.InterruptedApply == nil || js.InterruptedApply.Config != "seven-1g" || len(js.GPUs) == 0 {
		t.Errorf("mig show -o json = %+v, want the state and the interrupted apply", js)
	}

	half := r.show(t).GPUs[0].Instances
	if _, err := r.mig(t, "apply", "-c", "two-3g", "--journal", journal); err == nil || !strings.Contains(err.Error(), "gpud mig recover --rollback --journal "+journal) {
		t.Fatalf("apply over the journal = %v, want a refusal saying how to recover", err)
	}
	if got := r.show(t).GPUs[0].Instances; len(got) != len(half) {
		t.Fatalf("the refused apply changed GPU 0: %d instances, had %d", len(got), len(half))
	}

	if _, err := r.mig(t, "recover", "--journal", journal, "--rollback"); err != nil {
		t.Fatalf("recover --rollback: %v", err)
	}
	if got := profiles(r.show(t).GPUs[0]); got != "3g.20gb,3g.20gb" {
		t.Errorf("GPU 0 after the rollback: %s, want the two 3g.20gb before the apply", got)
	}
	for _, p := range []string{journal, fileio.TempName(journal)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after the rollback: %v", p, err)
		}
	}
	if out := r.showText(t, "--journal", journal); strings.Contains(out, "INTERRUPTED") {
		t.Errorf("mig show after the rollback still reports an interrupted apply:\n%s", out)
	}

	killApply(t, r, journal, "seven-1g")
	if _, err := r.mig(t, "recover", "--journal", journal); err != nil {
		t.Fatalf("recover: %v", err)
	}
	if got := profiles(r.show(t).GPUs[0]); got != strings.TrimSuffix(strings.Repeat("1g.5gb,", 7), ",") {
		t.Errorf("GPU 0 after finishing the apply: %s, want seven 1g.5gb", got)
	}
	if _, err := os.Stat(journal); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal left after recover: %v", err)
	}
	if _, err := r.mig(t, "recover", "--journal", journal); err != nil {
		t.Errorf("recover with nothing to recover = %v, want nil", err)
	}
}

func (r *migCLIRig) showText(t *testing.T, extra ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(t.Context(), append([]string{"mig", "show", "--simulate", "dgx-a100", "--sim-state-file", r.state}, extra...), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func profiles(g mig.GPUState) string {
	var ps []string
	for _, in := range g.Instances {
		ps = append(ps, in.Profile)
	}
	return strings.Join(ps, ",")
}

// jsonBuf decodes what is written to it into v.
type jsonBuf struct{ v any }

func (j *jsonBuf) Write(p []byte) (int, error) { return len(p), json.Unmarshal(p, j.v) }
