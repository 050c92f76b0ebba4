package k8senv

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Proc is a process a test started, its stdout and stderr in LogPath.
type Proc struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	err     error         // its exit status, valid once done is closed
}

// ProcOptions are how StartProc runs a process.
type ProcOptions struct {
	// Truncate starts the log afresh; otherwise the output is appended.
	Truncate bool
	// Setup changes the command before it starts (its directory,
	// environment, attributes).
	Setup func(*exec.Cmd)
}

// StartProc runs bin with args, its output written to logPath after a
// line naming the command.
func StartProc(name, bin string, args []string, logPath string, o ProcOptions) (*Proc, error) {
	flag := os.O_APPEND
	if o.Truncate {
		flag = os.O_TRUNC
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("k8senv: %w", err)
	}
	fmt.Fprintf(f, "+ %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if o.Setup != nil {
		o.Setup(cmd)
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("k8senv: start %s: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// startProc runs a control-plane process, its output in <dir>/<name>.log.
func startProc(dir, name, bin string, args []string) (*Proc, error) {
	return StartProc(name, bin, args, filepath.Join(dir, name+".log"), ProcOptions{Setup: func(cmd *exec.Cmd) {
		cmd.Dir = dir
		// Nothing is written outside the test's temp dir, not even by a
		// component that looks at $HOME or $TMPDIR.
		cmd.Env = append(os.Environ(), "HOME="+dir, "TMPDIR="+dir, "KUBECONFIG=")
		cmd.SysProcAttr = sysProcAttr()
	}})
}

// Exited reports whether the process has ended, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

func (p *Proc) exited() bool {
	ok, _ := p.Exited()
	return ok
}

// Stop asks the process to end (SIGTERM) and kills it when it has not after
// grace; it returns once the process is gone.
func (p *Proc) Stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Tail returns the last n lines of the process's log.
func (p *Proc) Tail(n int) string {
	f, err := os.Open(p.LogPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 4*n {
			lines = append(lines[:0], lines[len(lines)-n:]...)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// portInUse reports whether the process failed because a port it was given
// was taken between picking it and binding it.
func (p *Proc) portInUse() bool {
	b, err := os.ReadFile(p.LogPath)
	return err == nil && strings.Contains(string(b), "address already in use")
}

var errExited = errors.New("process exited")

// waitFor polls check every interval until it succeeds, p exits, or timeout
// passes; the error names what was waited for and the last check error.
func waitFor(p *Proc, what string, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		if p != nil && p.exited() {
			return fmt.Errorf("k8senv: %s exited (%v) before %s (log: %s): %w", p.Name, p.err, what, p.LogPath, errExited)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("k8senv: timed out after %s waiting for %s; last error: %v", timeout, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
