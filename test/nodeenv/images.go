package nodeenv

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images every node has (imported, never pulled: the node has no
// registry to pull from). Pods name ProbeImage with imagePullPolicy Never.
const (
	// PauseImage is containerd's sandbox image (pinned_images.sandbox):
	// the static test/nodeenv/pause program.
	PauseImage = "registry.k8s.io/pause:3.10.1"
	// ProbeImage runs test/nodeenv/probe, which reports what the container
	// sees of its GPUs (see ProbeReport).
	ProbeImage = "gpud.test/probe:1"
)

// buildImages builds the pause and probe programs (static) and writes
// both images to one `docker load` tarball in dir, which `ctr images
// import` reads.
func buildImages(dir string) (string, error) {
	images := map[name.Reference]v1.Image{}
	for ref, pkg := range map[string]string{
		PauseImage: "github.com/gpud/gpud/test/nodeenv/pause",
		ProbeImage: "github.com/gpud/gpud/test/nodeenv/probe",
	} {
		bin := filepath.Join(dir, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-trimpath", "-o", bin, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("nodeenv: go build %s: %w\n%s", pkg, err, out)
		}
		img, err := singleBinaryImage(bin, "/"+filepath.Base(pkg))
		if err != nil {
			return "", err
		}
		r, err := name.ParseReference(ref)
		if err != nil {
			return "", fmt.Errorf("nodeenv: %w", err)
		}
		images[r] = img
	}
	path := filepath.Join(dir, "images.tar")
	if err := tarball.MultiRefWriteToFile(path, images); err != nil {
		return "", fmt.Errorf("nodeenv: write %s: %w", path, err)
	}
	return path, nil
}

// singleBinaryImage is an image of one file, bin at path, which is also
// its entrypoint.
func singleBinaryImage(bin, path string) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("nodeenv: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Name: path[1:], Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, fmt.Errorf("nodeenv: %w", err)
	}
	if _, err := tw.Write(data); err != nil {
		return nil, fmt.Errorf("nodeenv: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("nodeenv: %w", err)
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("nodeenv: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("nodeenv: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("nodeenv: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint = []string{path}
	cfg.Config.Env = []string{"PATH=/"}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("nodeenv: %w", err)
	}
	return img, nil
}
