package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

const testRef = "ghcr.io/gpud/gpud:9.9.9-test"

// buildGpud builds cmd/gpud with the test's version (without make image's
// -trimpath, which would rebuild every package instead of reusing the
// build cache).
func buildGpud(t *testing.T, dir string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds gpud")
	}
	bin := filepath.Join(dir, "gpud")
	cmd := exec.Command("go", "build", "-ldflags", "-X main.version=9.9.9-test", "-o", bin, "../../cmd/gpud")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-O2 -Wno-deprecated-declarations")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// rootfs flattens img's layers into path -> content.
func rootfs(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files["/"+strings.TrimPrefix(h.Name, "/")] = data
		}
	}
}

// TestImage builds the image of a freshly built gpud, reads the OCI layout
// and the tarball back, and runs the entrypoint with the image's own C
// runtime.
func TestImage(t *testing.T) {
	dir := t.TempDir()
	bin := buildGpud(t, dir)
	out := filepath.Join(dir, "oci")
	tarPath := filepath.Join(dir, "gpud.tar")
	var stdout bytes.Buffer
	if err := run([]string{"--binary", bin, "--image", testRef, "--layout", out, "--tar", tarPath, "--revision", "abc123"}, &stdout); err != nil {
		t.Fatal(err)
	}

	idx, err := layout.ImageIndexFromPath(out)
	if err != nil {
		t.Fatalf("read OCI layout: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != testRef {
		t.Fatalf("index %+v, want one image named %s", im.Manifests, testRef)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("the layout's image is not valid: %v", err)
	}
	if mt, _ := img.MediaType(); mt != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("manifest media type %s, want OCI", mt)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if ep := cf.Config.Entrypoint; len(ep) != 1 || ep[0] != binaryPath {
		t.Errorf("entrypoint %v, want [%s]", ep, binaryPath)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.title": "gpud", "org.opencontainers.image.version": "9.9.9-test",
		"org.opencontainers.image.source": "https://github.com/gpud/gpud", "org.opencontainers.image.revision": "abc123",
	} {
		if got := cf.Config.Labels[k]; got != v {
			t.Errorf("label %s = %q, want %q", k, got, v)
		}
	}

	files := rootfs(t, img)
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(files[binaryPath], want) {
		t.Fatalf("%s in the image (%d bytes) is not the binary built (%d bytes)", binaryPath, len(files[binaryPath]), len(want))
	}
	if string(files["/etc/ld.so.conf"]) != ldSoConf {
		t.Errorf("/etc/ld.so.conf = %q, want the library dirs the NVIDIA runtime may use", files["/etc/ld.so.conf"])
	}
	libs := map[string]bool{}
	for p := range files {
		libs[path.Base(p)] = true
	}
	for _, lib := range append([]string{"libc.so.6"}, nvmlNeeds...) {
		if !libs[lib] {
			t.Errorf("the image lacks %s (gpud or libnvidia-ml.so.1 needs it)", lib)
		}
	}

	// The entrypoint runs: the image's root written out, the binary run by
	// the image's own dynamic loader with the image's libraries only.
	root := filepath.Join(dir, "rootfs")
	var loader string
	libDirs := map[string]bool{}
	for p, data := range files {
		dst := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(path.Base(p), "ld-linux") {
			loader = dst
		} else if strings.Contains(path.Base(p), ".so.") && !strings.HasPrefix(p, "/etc/") {
			libDirs[filepath.Dir(dst)] = true
		}
	}
	if loader == "" {
		t.Fatal("no dynamic loader in the image")
	}
	var dirs []string
	for d := range libDirs {
		dirs = append(dirs, d)
	}
	args := append([]string{"--library-path", strings.Join(dirs, ":"), filepath.Join(root, binaryPath)}, cf.Config.Entrypoint[1:]...)
	got, err := exec.Command(loader, append(args, "version")...).CombinedOutput()
	if err != nil || strings.TrimSpace(string(got)) != "gpud 9.9.9-test" {
		t.Fatalf("%s version in the image = %q, %v; want gpud 9.9.9-test", binaryPath, got, err)
	}

	// The tarball holds the same image (config and layer diff IDs are in
	// the config), and rebuilding gives the same digest.
	tag, _ := name.NewTag(testRef)
	tarImg, err := tarball.ImageFromPath(tarPath, &tag)
	if err != nil {
		t.Fatalf("read tarball: %v", err)
	}
	// (docker load's format has its own manifest: compare config and layers.)
	c1, _ := img.ConfigName()
	c2, _ := tarImg.ConfigName()
	if c1 != c2 {
		t.Errorf("tarball image config %s, layout image config %s", c2, c1)
	}
	d1, _ := img.Digest()
	again := filepath.Join(dir, "oci2")
	if err := run([]string{"--binary", bin, "--image", testRef, "--layout", again, "--revision", "abc123"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	idx2, _ := layout.ImageIndexFromPath(again)
	im2, _ := idx2.IndexManifest()
	if im2.Manifests[0].Digest != d1 {
		t.Errorf("rebuild digest %s, first build %s: the image is not reproducible", im2.Manifests[0].Digest, d1)
	}
}

func TestImageRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "gpud")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "no binary", args: []string{"--image", testRef, "--layout", dir}, want: "need --binary"},
		{name: "missing binary", args: []string{"--binary", filepath.Join(dir, "nope"), "--image", testRef, "--layout", dir}, want: "make build"},
		{name: "not ELF", args: []string{"--binary", notELF, "--image", testRef, "--layout", dir}, want: "not an ELF executable"},
		{name: "bad reference", args: []string{"--binary", notELF, "--image", "Not A Ref", "--layout", dir}, want: "--image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run(%v) = %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestDockerfileAndMakefileMatch: the Dockerfile builds the image this
// command builds (entrypoint, command, binary path), and `make image`'s
// default name is the repository the manifests and the chart deploy.
func TestDockerfileAndMakefileMatch(t *testing.T) {
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var entrypoint, cmd []string
	var copied string
	for _, line := range strings.Split(string(data), "\n") {
		instr, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch instr {
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &entrypoint); err != nil {
				t.Fatalf("Dockerfile ENTRYPOINT %s: want the exec (JSON) form: %v", rest, err)
			}
		case "CMD":
			if err := json.Unmarshal([]byte(rest), &cmd); err != nil {
				t.Fatalf("Dockerfile CMD %s: want the exec (JSON) form: %v", rest, err)
			}
		case "COPY":
			if f := strings.Fields(rest); len(f) == 3 && f[0] == "--from=build" {
				copied = f[2]
			}
		}
	}
	if !slices.Equal(entrypoint, []string{binaryPath}) || !slices.Equal(cmd, []string{"agent"}) || copied != binaryPath {
		t.Errorf("Dockerfile: ENTRYPOINT %v, CMD %v, binary copied to %s; hack/image: [%s], [agent], %s",
			entrypoint, cmd, copied, binaryPath, binaryPath)
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	const repo = "ghcr.io/gpud/gpud"
	if !strings.Contains(string(mk), repo+":$$app") {
		t.Errorf("make image's default name is not %s:<appVersion>", repo)
	}
	for _, f := range []string{"../../deploy/daemonset/daemonset.yaml", "../../deploy/dra/daemonset.yaml", "../../deploy/helm/gpud/values.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), repo) {
			t.Errorf("%s does not deploy %s, the image make image builds", f, repo)
		}
	}
}
