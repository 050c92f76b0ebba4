// Command probe is the node environment's workload: it reports what a
// container sees of its GPUs, as one line "PROBE <json>" on stdout (its
// container log), then again every $PROBE_INTERVAL (default: never) until
// it is stopped. The report holds the NVIDIA_* and CUDA_* environment, the
// /dev/nvidia* files present and what opening each gives ("ok", "ENXIO":
// the device cgroup allowed it but no driver answers, as with nodeenv's
// fake device nodes; "EPERM": the device cgroup or eBPF filter denied it),
// and the mount points, so tests assert on the container's own view.
// $PROBE_DEV_DIR adds the nvidia* files of another directory (the node's
// device files, mounted in) to the opens.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Report is what one probe line carries.
type Report struct {
	Env    map[string]string `json:"env"`
	Opens  map[string]string `json:"opens"`  // /dev/nvidia* path -> open result
	Mounts []string          `json:"mounts"` // mount points, from /proc/self/mountinfo
}

func main() {
	// "probe env KEY=VALUE...": the probe as a process inside the
	// container that sets its own environment before CUDA would start
	// (tests exec it next to the first): it replaces itself with its
	// environment changed, so /proc/<pid>/environ shows the new values.
	if len(os.Args) > 2 && os.Args[1] == "env" {
		reexec(os.Args[2:])
	}
	report()
	var tick <-chan time.Time
	if d, err := time.ParseDuration(os.Getenv("PROBE_INTERVAL")); err == nil && d > 0 {
		tick = time.Tick(d)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	for {
		select {
		case <-tick:
			report()
		case <-stop:
			return
		}
	}
}

func report() {
	r := Report{Env: map[string]string{}, Opens: map[string]string{}}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "NVIDIA_") || strings.HasPrefix(k, "CUDA_") || strings.HasPrefix(k, "GPUD_") {
			r.Env[k] = v
		}
	}
	paths, _ := filepath.Glob("/dev/nvidia*")
	caps, _ := filepath.Glob("/dev/nvidia-caps/*")
	paths = append(paths, caps...)
	// $PROBE_DEV_DIR: another directory of device files (the node's, by
	// a hostPath volume), so a test sees what the device cgroup says of
	// the GPUs the container was not given.
	if dir := os.Getenv("PROBE_DEV_DIR"); dir != "" {
		more, _ := filepath.Glob(filepath.Join(dir, "nvidia*"))
		paths = append(paths, more...)
		more, _ = filepath.Glob(filepath.Join(dir, "nvidia-caps", "*"))
		paths = append(paths, more...)
	}
	for _, p := range paths {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			continue
		}
		r.Opens[p] = open(p)
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) > 4 {
				r.Mounts = append(r.Mounts, fields[4])
			}
		}
		f.Close()
		sort.Strings(r.Mounts)
	}
	b, _ := json.Marshal(r)
	fmt.Printf("PROBE %s\n", b)
}

func open(p string) string {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	switch {
	case err == nil:
		f.Close()
		return "ok"
	case errors.Is(err, syscall.ENXIO):
		return "ENXIO"
	case errors.Is(err, syscall.EPERM):
		return "EPERM"
	case errors.Is(err, syscall.ENODEV):
		return "ENODEV"
	default:
		return err.Error()
	}
}

// reexec replaces the process with the probe (no arguments) whose
// environment is this one with sets (KEY=VALUE) applied.
func reexec(sets []string) {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, kv := range sets {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	err := syscall.Exec("/proc/self/exe", []string{os.Args[0]}, list)
	fmt.Fprintln(os.Stderr, "probe: re-exec with a changed environment:", err)
	os.Exit(1)
}
