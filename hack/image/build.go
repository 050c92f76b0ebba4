package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// binaryPath is where the image keeps gpud; the entrypoint.
const binaryPath = "/usr/local/bin/gpud"

// nvmlNeeds are the C libraries libnvidia-ml.so.1 links besides libc: go-nvml
// dlopens it, so the binary's own DT_NEEDED does not list them.
var nvmlNeeds = []string{"libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"}

// ldSoConf is the image's /etc/ld.so.conf.
const ldSoConf = "include /etc/ld.so.conf.d/*.conf\n/usr/local/lib\n/usr/lib/x86_64-linux-gnu\n/usr/lib/aarch64-linux-gnu\n/usr/lib64\n/lib64\n"

// build assembles the image: runtime layer, binary layer, config.
func build(o options) (v1.Image, error) {
	ref, err := name.ParseReference(o.image)
	if err != nil {
		return nil, fmt.Errorf("--image %q: %w", o.image, err)
	}
	bin, err := os.ReadFile(o.binary)
	if err != nil {
		return nil, fmt.Errorf("--binary: %w (build it first: make build)", err)
	}
	runtimeFiles, err := runtimeLibs(o.binary, filepath.SplitList(o.libDirs))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	var adds []mutate.Addendum
	if len(runtimeFiles) > 0 {
		l, err := layerOf(runtimeFiles)
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.Addendum{Layer: l, History: v1.History{CreatedBy: "hack/image: C runtime for gpud and NVML (" + strings.Join(slices.Sorted(maps.Keys(runtimeFiles)), ", ") + ")"}})
	}
	l, err := layerOf(map[string][]byte{binaryPath: bin})
	if err != nil {
		return nil, err
	}
	adds = append(adds, mutate.Addendum{Layer: l, History: v1.History{CreatedBy: "hack/image: " + binaryPath}})
	if img, err = mutate.Append(img, adds...); err != nil {
		return nil, err
	}
	version := "dev"
	if tag, ok := ref.(name.Tag); ok {
		version = tag.TagStr()
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "gpud",
		"org.opencontainers.image.description": "gpud: node GPU agent (device plugin or DRA driver, MIG, sharing, health, DCGM-compatible metrics)",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.source":      "https://github.com/gpud/gpud",
		"org.opencontainers.image.url":         "https://github.com/gpud/gpud",
	}
	if o.revision != "" {
		labels["org.opencontainers.image.revision"] = o.revision
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.arch
	cf.Config.Entrypoint = []string{binaryPath}
	cf.Config.Cmd = []string{"agent"}
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cf.Config.Labels = labels
	// Root: the agent opens /dev/nvidia*, the kubelet's sockets and the
	// host's /proc (the DaemonSet makes it privileged).
	cf.Config.User = "0:0"
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	return mutate.ConfigFile(img, cf)
}

// runtimeLibs returns the files a dynamically linked binary needs at run
// time, keyed by the path the loader looks for them at: its ELF
// interpreter, its DT_NEEDED libraries and theirs, and NVML's. A static
// binary needs none.
func runtimeLibs(binary string, dirs []string) (map[string][]byte, error) {
	f, err := elf.Open(binary)
	if err != nil {
		return nil, fmt.Errorf("--binary %s: not an ELF executable: %w", binary, err)
	}
	defer f.Close()
	interp := ""
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			data, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, err
			}
			interp = strings.TrimRight(string(data), "\x00")
		}
	}
	if interp == "" {
		return nil, nil
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	data, err := os.ReadFile(interp) // follows the /lib64 symlink
	if err != nil {
		return nil, fmt.Errorf("the binary's loader %s: %w", interp, err)
	}
	out[interp] = data
	// The NVIDIA container runtime puts the driver's libraries into the
	// container (/usr/lib/x86_64-linux-gnu, or /usr/lib64 on RPM hosts)
	// and runs ldconfig on its root; this tells ldconfig every place they
	// may land, so dlopen("libnvidia-ml.so.1") finds it through the cache.
	out["/etc/ld.so.conf"] = []byte(ldSoConf)
	queue := append(slices.Clone(needed), nvmlNeeds...)
	seen := map[string]bool{}
	for len(queue) > 0 {
		lib := queue[0]
		queue = queue[1:]
		if seen[lib] || path.Base(interp) == lib {
			continue
		}
		seen[lib] = true
		p, err := findLib(lib, dirs)
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out[p] = data
		lf, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		deps, err := lf.ImportedLibraries()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		queue = append(queue, deps...)
	}
	return out, nil
}

// findLib finds a shared library in dirs, in order.
func findLib(lib string, dirs []string) (string, error) {
	for _, d := range dirs {
		p := filepath.Join(d, lib)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s: install the C library (libc6) or pass --lib-dirs", lib, strings.Join(dirs, ":"))
}

// layerOf makes an OCI layer of files (absolute path -> content), with
// their parent directories, root-owned, fixed times, 0755 (0644 under
// /etc).
func layerOf(files map[string][]byte) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	dirs := map[string]bool{}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		rel := strings.TrimPrefix(path.Clean(p), "/")
		var parents []string
		for d := path.Dir(rel); d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append(parents, d)
			dirs[d] = true
		}
		slices.Reverse(parents)
		for _, d := range parents {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		mode := int64(0o755)
		if strings.HasPrefix(rel, "etc/") {
			mode = 0o644
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: mode, Size: int64(len(files[p])), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[p]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// writeLayout replaces dir with an OCI image layout holding img, its
// manifest annotated with the reference (org.opencontainers.image.ref.name).
func writeLayout(dir, ref string, img v1.Image) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("--layout %s: %w", dir, err)
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref}))
}

// writeTarball writes a `docker load` tarball of img tagged ref.
func writeTarball(file, ref string, img v1.Image) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(file, r, img); err != nil {
		return errors.Join(fmt.Errorf("--tar %s", file), err)
	}
	return nil
}
