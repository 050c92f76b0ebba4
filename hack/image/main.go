// Command image builds gpud's container image without a container engine:
// an OCI image layout (and optionally a `docker load`-able tarball) from a
// gpud binary already built, using go-containerregistry. `make image` runs
// it; the Dockerfile builds the same image for users with Docker.
//
// The image is scratch plus two layers: the C runtime the binary links
// (its ELF interpreter and DT_NEEDED libraries, read from the binary with
// debug/elf and copied from this machine), together with the libraries
// libnvidia-ml.so.1 itself needs when go-nvml dlopens it (libm, libdl,
// libpthread, librt: the NVIDIA container runtime injects only its own
// libraries) and an /etc/ld.so.conf naming where that runtime puts them;
// and the binary at /usr/local/bin/gpud. A static binary gets
// no runtime layer. Files have fixed owners and times, and the config no
// creation time, so the same inputs give the same digest.
//
//	go run ./hack/image --binary bin/gpud --image ghcr.io/gpud/gpud:0.1.0 \
//	    --layout bin/image/oci [--tar bin/image/gpud.tar]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// run parses args, builds the image and writes it.
func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.binary, "binary", "", "the gpud binary to put in the image (required)")
	fs.StringVar(&o.image, "image", "", "image reference, e.g. ghcr.io/gpud/gpud:0.1.0 (required); its tag is the image's version label")
	fs.StringVar(&o.layout, "layout", "", "directory to write the OCI image layout to (replaced)")
	fs.StringVar(&o.tarball, "tar", "", "also write a `docker load`-able tarball here")
	fs.StringVar(&o.revision, "revision", "", "source revision for the org.opencontainers.image.revision label (e.g. git rev-parse HEAD)")
	fs.StringVar(&o.arch, "arch", runtime.GOARCH, "the binary's architecture (GOARCH)")
	fs.StringVar(&o.libDirs, "lib-dirs", defaultLibDirs(runtime.GOARCH), "colon-separated directories the C runtime libraries are copied from")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.binary == "" || o.image == "" || (o.layout == "" && o.tarball == "") {
		return fmt.Errorf("need --binary, --image and --layout or --tar (see -h)")
	}
	img, err := build(o)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if o.layout != "" {
		if err := writeLayout(o.layout, o.image, img); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: OCI layout %s (%s)\n", o.image, o.layout, digest)
	}
	if o.tarball != "" {
		if err := writeTarball(o.tarball, o.image, img); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: tarball %s (docker load -i %s)\n", o.image, o.tarball, o.tarball)
	}
	return nil
}

// options are the command's flags.
type options struct {
	binary, image, layout, tarball, revision, arch, libDirs string
}

// defaultLibDirs are Debian's multiarch library directories for arch.
func defaultLibDirs(arch string) string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[arch]
	if triplet == "" {
		return "/lib:/usr/lib"
	}
	return strings.Join([]string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib", "/usr/lib"}, ":")
}
