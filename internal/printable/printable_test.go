package printable

import (
	"strings"
	"testing"
)

func TestText(t *testing.T) {
	if got := Text("line 3: bad key"); got != "line 3: bad key" {
		t.Errorf("Text(plain) = %q, want it unchanged", got)
	}
	got := Text("a\x00b" + strings.Repeat("x", 1000))
	if strings.ContainsRune(got, 0) || len(got) > MaxQuoted+20 {
		t.Errorf("Text(binary) = %q, want quoted and cut", got)
	}
	long := strings.Repeat("plain text ", 100)
	if got := Text(long); got != long {
		t.Errorf("Text(long plain text) was changed")
	}
	if got := Text("bad \xff byte"); got != `"bad \xff byte"` {
		t.Errorf("Text(invalid UTF-8) = %q, want quoted", got)
	}
}

func TestLines(t *testing.T) {
	if got := Lines("ok line\nbad \x1b[31m line"); !strings.HasPrefix(got, "ok line\n\"bad \\x1b") {
		t.Errorf("Lines = %q, want the first line kept and the second quoted", got)
	}
}

func TestQuote(t *testing.T) {
	if got := Quote("a"); got != `"a"` {
		t.Errorf("Quote(a) = %s", got)
	}
	if got := Quote(strings.Repeat("y", 500)); !strings.HasSuffix(got, `"...`) || len(got) != MaxQuoted+5 {
		t.Errorf("Quote(500 bytes) = %d bytes %q..., want cut at %d", len(got), got[:10], MaxQuoted)
	}
}
