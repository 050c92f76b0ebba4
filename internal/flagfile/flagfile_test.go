package flagfile

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpud/gpud/internal/strictyaml"
)

// testFlags is a flag set of the kinds the agent has: strings, a
// duration, a bool, a list parsed by Set, and the config flag itself.
func testFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("config", "", "")
	fs.String("http-addr", "", "")
	fs.String("log-level", "info", "")
	fs.String("log-format", "text", "")
	fs.String("mig-config", "", "")
	fs.Duration("rediscover-interval", 30*time.Second, "")
	fs.Bool("enforce", false, "")
	fs.Func("health-ignore-xids", "comma-separated numbers", func(s string) error {
		for _, f := range strings.Split(s, ",") {
			var n uint
			if _, err := fmt.Sscan(f, &n); err != nil {
				return fmt.Errorf("%q is not an Xid number", f)
			}
		}
		return nil
	})
	return fs
}

func TestApplySetsFlagsAndLines(t *testing.T) {
	fs := testFlags()
	if err := fs.Parse([]string{"--log-level", "warn"}); err != nil {
		t.Fatal(err)
	}
	lines, err := Apply(fs, "agent.yaml", []byte("http-addr: 127.0.0.1:9400\nlog-level: debug\nhealth-ignore-xids: [13, 31]\nrediscover-interval: 5s\nenforce: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"http-addr": "127.0.0.1:9400", "log-level": "warn", "rediscover-interval": "5s", "enforce": "true"}
	for name, v := range want {
		if got := fs.Lookup(name).Value.String(); got != v {
			t.Errorf("--%s = %q, want %q", name, got, v)
		}
	}
	if lines["http-addr"] != 1 || lines["log-level"] != 2 || lines["enforce"] != 5 {
		t.Errorf("lines = %v, want http-addr 1, log-level 2 (named though the command line won), enforce 5", lines)
	}
}

// badConfigs are config files users wrote that must be refused with
// FILE:LINE; they seed FuzzApply.
var badConfigs = []string{
	"http-adr: x\n",
	"rediscover-interval: soon\n",
	"- a\n- b\n",
	"log-level: info\nlog-level: debug\n",
	"http-addr: {a: b}\n",
	"health-ignore-xids: [[1, 2]]\n",
	"health-ignore-xids: [13, x]\n",
	"config: other.yaml\n",
	"\x00\x01\x02binary\xff\xfe",
	"a: b: c\n",
	"---\nlog-level: info\n---\nlog-level: debug\n",
	"mig-config: [a, b]\nlog-level: {x: 1}\n",
	"log-level: &a info\nlog-format: *a\nlog-level: x\n",
	"? [a]\n: b\n",
	"shares: !0000000000 00000", // makes go-yaml v1.19.2's decoder dereference nil
	wideConfig(strictyaml.MaxKeysPerLevel + 1),
}

func TestBadConfigsRefused(t *testing.T) {
	for _, s := range badConfigs {
		_, err := Apply(testFlags(), "agent.yaml", []byte(s))
		if err == nil {
			t.Errorf("config %q accepted", s)
			continue
		}
		if !strings.HasPrefix(err.Error(), "agent.yaml") {
			t.Errorf("config %q: error %q does not name the file", s, err)
		}
	}
}

func TestUnknownKeyListsFlagsOnce(t *testing.T) {
	_, err := Apply(testFlags(), "agent.yaml", []byte("log-levl: x\nhttp-adr: y\n"))
	if err == nil {
		t.Fatal("unknown keys accepted")
	}
	msg := err.Error()
	if !strings.Contains(msg, `agent.yaml:1: unknown key "log-levl"`) || !strings.Contains(msg, `agent.yaml:2: unknown key "http-adr"`) {
		t.Errorf("error %q does not name both keys with their lines", msg)
	}
	if n := strings.Count(msg, "keys are the flag names"); n != 1 {
		t.Errorf("error lists the flag names %d times, want once: %q", n, msg)
	}
	_, list, _ := strings.Cut(msg, "flag names: ")
	list, _, _ = strings.Cut(list, ")")
	for _, name := range strings.Split(list, ", ") {
		if name == "config" {
			t.Errorf("error offers the config key itself: %q", msg)
		}
	}
	if !strings.Contains(list, "mig-config") {
		t.Errorf("flag list %q lacks mig-config", list)
	}
}

// wideConfig is a config file with n keys in its top mapping: the YAML
// library's parser is quadratic in them.
func wideConfig(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "k%d: v\n", i)
	}
	return b.String()
}

// TestYAMLGuards checks a file goes through strictyaml's guards with its
// errors naming file and line: a mapping too wide for the parser is
// refused before parsing, and a file of unknown keys gives a bounded
// error, not one line per key.
func TestYAMLGuards(t *testing.T) {
	_, err := Apply(testFlags(), "agent.yaml", []byte(wideConfig(5000)))
	want := fmt.Sprintf("agent.yaml:%d: ", strictyaml.MaxKeysPerLevel+1)
	if !errors.Is(err, strictyaml.ErrTooWide) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("5000 keys: %v, want ErrTooWide starting %q", err, want)
	}
	_, err = Apply(testFlags(), "agent.yaml", []byte(wideConfig(strictyaml.MaxKeysPerLevel)))
	if err == nil {
		t.Fatal("unknown keys accepted")
	}
	if n := strings.Count(err.Error(), "\n") + 1; n > MaxErrors+1 {
		t.Errorf("%d unknown keys: %d error lines, want at most %d", strictyaml.MaxKeysPerLevel, n, MaxErrors+1)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("agent.yaml:%d: too many errors", MaxErrors+1)) {
		t.Errorf("error does not say where it stopped:\n%s", err)
	}
	_, err = Apply(testFlags(), "agent.yaml", []byte("log-level: info\nhttp-addr: [a\n"))
	var fe *Error
	if !errors.As(err, &fe) || fe.Line == 0 || !strings.HasPrefix(err.Error(), fmt.Sprintf("agent.yaml:%d: ", fe.Line)) {
		t.Errorf("syntax error = %v, want agent.yaml:LINE", err)
	}
}

// TestFileIsCapped checks that an endless config file is refused after
// the cap instead of read whole.
func TestFileIsCapped(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	if _, err := ApplyFile(testFlags(), "/dev/zero"); err == nil {
		t.Fatal("--config /dev/zero accepted")
	}
}

// FuzzApply feeds config files to Apply: it never panics, an error always
// starts with the file name and never carries raw control bytes, and an
// accepted file sets only flags the set has.
func FuzzApply(f *testing.F) {
	for _, s := range badConfigs {
		f.Add([]byte(s))
	}
	f.Add([]byte("http-addr: 127.0.0.1:9400\nlog-level: debug\nhealth-ignore-xids: [13, 31]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := testFlags()
		lines, err := Apply(fs, "agent.yaml", data)
		if err != nil {
			msg := err.Error()
			for _, line := range strings.Split(msg, "\n") {
				if !strings.HasPrefix(line, "agent.yaml") {
					t.Fatalf("error line %q does not start with the file name", line)
				}
			}
			if !utf8.ValidString(msg) || strings.ContainsAny(msg, "\x00\x01\x1b\x7f") {
				t.Fatalf("error %q carries raw bytes", msg)
			}
			return
		}
		for name := range lines {
			if fs.Lookup(name) == nil || name == "config" {
				t.Fatalf("accepted key %q is not a flag", name)
			}
		}
	})
}

// TestFlagError: a FlagError names the flag with its dashes and keeps the
// cause for errors.Is.
func TestFlagError(t *testing.T) {
	cause := errors.New("want text or json")
	err := error(&FlagError{Flag: "log-format", Err: fmt.Errorf("%q: %w", "xml", cause)})
	if got, want := err.Error(), `--log-format: "xml": want text or json`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, cause) {
		t.Errorf("errors.Is(%v, cause) = false, want the cause unwrapped", err)
	}
}
