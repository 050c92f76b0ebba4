// Command fakemps stands in for nvidia-cuda-mps-control in tests: with -d
// it starts a background control daemon on a unix socket in
// $CUDA_MPS_PIPE_DIRECTORY (and returns once it listens); without
// arguments it is the control client, sending each stdin line to the
// daemon and printing the answer. The daemon answers the commands gpud
// uses: get/set_default_active_thread_percentage,
// get/set_default_device_pinned_mem_limit, get_server_list (no servers:
// nothing spawns them here) and quit; anything else is "Invalid command".
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	pipe := os.Getenv("CUDA_MPS_PIPE_DIRECTORY")
	if pipe == "" {
		pipe = "/tmp/nvidia-mps"
	}
	sock := filepath.Join(pipe, "control")
	switch {
	case os.Getenv("FAKEMPS_DAEMON") == "1":
		os.Exit(daemon(sock))
	case len(os.Args) > 1 && os.Args[1] == "-d":
		os.Exit(start(sock))
	default:
		os.Exit(client(sock))
	}
}

// start re-executes itself detached as the daemon and waits for its socket.
func start(sock string) int {
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		fmt.Fprintln(os.Stderr, "An instance of this daemon is already running")
		return 1
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "FAKEMPS_DAEMON=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for range 200 {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return 0
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Fprintln(os.Stderr, "daemon did not start")
	return 1
}

func daemon(sock string) int {
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return 1
	}
	logf := func(format string, args ...any) {}
	if dir := os.Getenv("CUDA_MPS_LOG_DIRECTORY"); dir != "" {
		if f, err := os.OpenFile(filepath.Join(dir, "control.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			defer f.Close()
			logf = func(format string, args ...any) { fmt.Fprintf(f, format+"\n", args...) }
		}
	}
	_ = os.WriteFile(filepath.Join(filepath.Dir(sock), "control.pid"), []byte(fmt.Sprint(os.Getpid())), 0o644)
	logf("started pid %d devices %s", os.Getpid(), os.Getenv("CUDA_VISIBLE_DEVICES"))
	threads := "100.0"
	limits := map[string]string{}
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			logf("cmd %s", sc.Text())
			switch {
			case f[0] == "get_default_active_thread_percentage":
				fmt.Fprintln(c, threads)
			case f[0] == "set_default_active_thread_percentage" && len(f) == 2:
				threads = f[1]
				fmt.Fprintln(c, threads)
			case f[0] == "set_default_device_pinned_mem_limit" && len(f) == 3:
				limits[f[1]] = f[2]
				fmt.Fprintln(c)
			case f[0] == "get_default_device_pinned_mem_limit" && len(f) == 2:
				fmt.Fprintln(c, limits[f[1]])
			case f[0] == "get_server_list":
				fmt.Fprintln(c)
			case f[0] == "quit":
				ln.Close()
				_ = os.Remove(sock)
				_ = os.Remove(filepath.Join(filepath.Dir(sock), "control.pid"))
				fmt.Fprintln(c)
				c.Close()
				logf("quit")
				return 0
			default:
				fmt.Fprintln(c, "Invalid command")
			}
		}
		c.Close()
	}
}

func client(sock string) int {
	c, err := net.Dial("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "Cannot find MPS control daemon process")
		return 1
	}
	defer c.Close()
	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewReader(c)
	for in.Scan() {
		fmt.Fprintln(c, in.Text())
		line, err := out.ReadString('\n')
		if err != nil {
			return 0 // quit closes the connection
		}
		fmt.Print(line)
	}
	return 0
}
