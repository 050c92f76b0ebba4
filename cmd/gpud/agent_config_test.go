package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpud/gpud/internal/flagfile"
)

// TestAgentValidatesBeforeStarting feeds one bad value per flag: the agent
// must refuse it before it binds anything (no admin socket, no plugin
// dir, no CDI spec), naming the flag once and what is allowed.
func TestAgentValidatesBeforeStarting(t *testing.T) {
	tests := []struct {
		flag, value string
		want        string
	}{
		{"metrics-compat", "bogus", `--metrics-compat: "bogus": want dcgm, native or both`},
		{"mig-strategy", "diagonal", `--mig-strategy: "diagonal": want none, single or mixed`},
		{"device-list-strategy", "volume-mounts", `--device-list-strategy: "volume-mounts": want cdi, envvar or both`},
		{"resource-prefix", "nvidia", `--resource-prefix: "nvidia": want a domain`},
		{"memory-watchdog-interval", "1ns", "--memory-watchdog-interval: 1ns: want at least 100ms"},
		{"health-recovery-period", "-5m", "--health-recovery-period: -5m0s: must not be negative"},
		{"health-ignore-xids", "13,x", `--health-ignore-xids: "x" is not an Xid number`},
		{"rediscover-interval", "1ms", "--rediscover-interval: 1ms: want at least 1s"},
		{"sample-interval", "1ns", "--sample-interval: 1ns: want at least 10ms"},
		{"enforce-memory", "warn", `--enforce-memory: "warn": want off, report or kill`},
		{"log-level", "loud", `--log-level: "loud": want debug, info, warn or error`},
		{"log-format", "xml", `--log-format: "xml": want text or json`},
		{"http-addr", "9400", `--http-addr: "9400": want host:port`},
		{"mig-config", "all-1g", `--mig-config: "all-1g" needs --mig-config-file`},
		{"pod-resources-socket", "", "--pod-resources-socket: empty"},
	}
	for _, tc := range tests {
		t.Run(tc.flag, func(t *testing.T) {
			dir := t.TempDir()
			var logs bytes.Buffer
			err := runAgent(t.Context(), agentArgs(dir, "--simulate", "dgx-a100", "--http-addr", freeAddr(t), "--"+tc.flag, tc.value), io.Discard, &logs)
			if err == nil {
				t.Fatalf("--%s %q accepted", tc.flag, tc.value)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q lacks %q", msg, tc.want)
			}
			if n := strings.Count(msg, "--"+tc.flag+":"); n != 1 {
				t.Errorf("error %q names --%s %d times, want once", msg, tc.flag, n)
			}
			for _, doubled := range []string{"telemetry: telemetry", "deviceplugin: deviceplugin", "sharing: sharing"} {
				if strings.Contains(msg, doubled) {
					t.Errorf("error %q has a doubled prefix", msg)
				}
			}
			for _, p := range []string{"admin.sock", "dp", "cdi"} {
				if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
					t.Errorf("%s exists: the agent started something before validating", p)
				}
			}
			if logs.Len() > 0 {
				t.Errorf("the agent logged before refusing its config:\n%s", logs.String())
			}
		})
	}
}

// TestAgentRefusesAdminSocketOverAFile checks that --admin-socket naming a
// regular file is refused and the file is left as it was.
func TestAgentRefusesAdminSocketOverAFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(file, []byte("keep me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := runAgent(t.Context(), agentArgs(dir, "--simulate", "dgx-a100", "--http-addr", "", "--admin-socket", file), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--admin-socket") || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("runAgent = %v, want an --admin-socket error", err)
	}
	if data, err := os.ReadFile(file); err != nil || string(data) != "keep me\n" {
		t.Fatalf("the file is now %q, %v", data, err)
	}
}

// TestAgentRefusesSharingForOtherDevices checks that --sharing-config is
// checked against the node's devices before the agent starts.
func TestAgentRefusesSharingForOtherDevices(t *testing.T) {
	dir := t.TempDir()
	sharing := filepath.Join(dir, "sharing.yaml")
	if err := os.WriteFile(sharing, []byte("devices:\n  \"99\":\n    replicas: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := runAgent(t.Context(), agentArgs(dir, "--simulate", "dgx-a100", "--http-addr", "", "--sharing-config", sharing), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--sharing-config") || !strings.Contains(err.Error(), `"99"`) {
		t.Fatalf("runAgent = %v, want a --sharing-config error naming key \"99\"", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "admin.sock")); err == nil {
		t.Error("the admin socket exists: the agent started before refusing its sharing config")
	}
}

// TestConfigFlagsWin checks the one rule at start and at reload: a flag on
// the command line wins over the config file, and a reloaded file is
// validated like the first one (unknown keys, values), naming file:line.
func TestConfigFlagsWin(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "agent.yaml")
	layouts := filepath.Join(dir, "layouts.yaml")
	if err := os.WriteFile(layouts, []byte("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n  b:\n    - devices: all\n      mig-enabled: false\n  c:\n    - devices: all\n      mig-enabled: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("mig-config-file: " + layouts + "\nmig-config: a\nlog-level: debug\n")
	args := agentArgs(dir, "--config", cfgPath, "--mig-config", "b")
	c, err := loadAgentConfig(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.mig.layout.Name != "b" || c.logLevel != "debug" || c.mig.layout.File != layouts {
		t.Fatalf("at start: mig-config %q, log-level %q, mig-config-file %q; want b (flag), debug and the file (config)", c.mig.layout.Name, c.logLevel, c.mig.layout.File)
	}
	reload := agentReloader(args)
	write("mig-config-file: " + layouts + "\nmig-config: c\n")
	o, err := reload()
	if err != nil {
		t.Fatal(err)
	}
	if o.Name != "b" {
		t.Errorf("after reload: mig-config %q, want b: the command line wins at reload too", o.Name)
	}
	write("mig-config-file: " + layouts + "\nmig-confg: c\n")
	if _, err := reload(); err == nil || !strings.Contains(err.Error(), "agent.yaml:2: ") || !strings.Contains(err.Error(), `"mig-confg"`) {
		t.Errorf("reload with an unknown key = %v, want agent.yaml:2 naming it", err)
	}
	write("mig-config-file: " + layouts + "\nmemory-watchdog-interval: 1ns\n")
	if _, err := reload(); err == nil || !strings.Contains(err.Error(), "agent.yaml:2: memory-watchdog-interval") {
		t.Errorf("reload with a bad value = %v, want agent.yaml:2 naming memory-watchdog-interval", err)
	}
}

// badAgentConfigs are agent config files users wrote that must be refused:
// keys or values of the agent's flags (malformed YAML is internal/flagfile's
// to refuse, and its tests').
var badAgentConfigs = []string{
	"http-adr: x\n",
	"rediscover-interval: soon\n",
	"health-ignore-xids: [[1, 2]]\n",
	"config: other.yaml\n",
	"metrics-compat: bogus\n",
	"memory-watchdog-interval: 1ns\n",
	"health-recovery-period: -5m\n",
	"mig-config: [a, b]\n",
}

func TestBadAgentConfigsRefused(t *testing.T) {
	for _, s := range badAgentConfigs {
		fs, c := agentFlagSet(io.Discard)
		// Paths on the command line (they win) keep validate in the temp dir.
		if err := fs.Parse(agentArgs(t.TempDir())); err != nil {
			t.Fatal(err)
		}
		_, err := flagfile.Apply(fs, "agent.yaml", []byte(s))
		if err == nil && len(c.validate()) == 0 {
			t.Errorf("config %q accepted", s)
		}
	}
}

// TestAgentRefusesBadLayoutFile: the configured MIG layout goes through
// the layout parser before anything starts.
func TestAgentRefusesBadLayoutFile(t *testing.T) {
	dir := t.TempDir()
	layouts := filepath.Join(dir, "layouts.yaml")
	for name, body := range map[string]string{
		"bad version":  "version: v2\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n",
		"missing name": "version: v1\nmig-configs:\n  b:\n    - devices: all\n      mig-enabled: false\n",
		"binary file":  "\x00\x01\x02\xff",
		"half a slice": "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 2.5}\n",
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(layouts, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			err := runAgent(t.Context(), agentArgs(dir, "--simulate", "dgx-a100", "--http-addr", "", "--mig-config-file", layouts, "--mig-config", "a"), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), "--mig-config") {
				t.Fatalf("runAgent = %v, want a --mig-config or --mig-config-file error", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "admin.sock")); err == nil {
				t.Error("the admin socket exists: the agent started before refusing its layout")
			}
		})
	}
}
