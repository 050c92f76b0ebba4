package fileio

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestReadFileLimit(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, make([]byte, 11), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(p, 10); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("11 bytes with limit 10: err = %v, want ErrTooLarge", err)
	}
	got, err := ReadFile(p, 11)
	if err != nil || len(got) != 11 {
		t.Fatalf("11 bytes with limit 11: %d bytes, err %v", len(got), err)
	}
	if _, err := ReadFile(dir, 10); err == nil {
		t.Fatal("reading a directory: want an error")
	}
}

func TestReadFileDevZeroIsCapped(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	if _, err := ReadFile("/dev/zero", 1<<10); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("/dev/zero: err = %v, want ErrTooLarge", err)
	}
}

func TestWriteFileReplacesAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	// A temp file left by a crash is reused, not accumulated.
	if err := os.WriteFile(TempName(p), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"one", "two"} {
		if err := WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(p)
		if string(got) != s {
			t.Fatalf("got %q, want %q", got, s)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("dir holds %d entries, want only state.json", len(ents))
	}
}

func TestWriteFileErrorKeepsOld(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); err == nil {
		t.Fatal("write into a missing directory: want an error")
	}
	p := filepath.Join(dir, "f")
	if err := WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory in the temp file's place makes the write fail.
	if err := os.Mkdir(TempName(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new"), 0o600); err == nil {
		t.Fatal("want an error when the temp file cannot be created")
	}
	if got, _ := os.ReadFile(p); string(got) != "old" {
		t.Fatalf("after a failed write the file holds %q, want old", got)
	}
}
