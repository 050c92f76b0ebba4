package manifest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPatchFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c := corev1.Container{Name: "gpud", Args: []string{"agent"}}
	var got corev1.Container
	ok := write("ok.yaml", "- op: add\n  path: /args/-\n  value: --scheduler-addr=s:9403\n")
	if err := PatchFile(c, ok, &got); err != nil {
		t.Fatal(err)
	}
	if want := []string{"agent", "--scheduler-addr=s:9403"}; !slices.Equal(got.Args, want) {
		t.Errorf("args = %v, want %v", got.Args, want)
	}
	for name, body := range map[string]string{
		"missing.yaml":  "- op: replace\n  path: /nope/0\n  value: x\n",       // path absent
		"typo.yaml":     "- op: add\n  path: /imagePullPolicyy\n  value: x\n", // unknown field after patching
		"notpatch.yaml": "op: add\n",                                          // not a list of operations
	} {
		err := PatchFile(c, write(name, body), &got)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v, want one naming the file", name, err)
		}
	}
}
