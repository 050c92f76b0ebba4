// Command release writes what `make release VERSION=x.y.z` ships, apart
// from the binaries and the image the Makefile builds: the Helm chart
// packaged with version and appVersion set to the release's, the plain
// manifests of deploy/ with every gpud image at the release's tag, and
// the CustomResourceDefinitions to apply before `helm upgrade` (Helm
// installs a chart's crds/ but never upgrades them).
//
//	go run ./hack/release --version 1.2.3 --out bin/release [--image ghcr.io/gpud/gpud] [--mtime UNIX]
//
// Output, under --out:
//
//	gpud-<version>.tgz            the chart (helm install gpud gpud-<version>.tgz)
//	gpud-crds-<version>.yaml      the CRDs (kubectl apply --server-side -f)
//	manifests/<dir>/...           deploy/{daemonset,dra,scheduler,monitoring,certs}, tags set
//
// Files carry --mtime (default: the Unix epoch) so the same inputs give
// the same bytes.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
)

func main() {
	// Helm's loader logs each symlink it follows (crds/, files/) at Info.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// options are the command line.
type options struct {
	version, out, image, root string
	mtime                     time.Time
}

// manifestDirs are deploy/'s plain-manifest directories a release ships.
var manifestDirs = []string{"daemonset", "dra", "scheduler", "monitoring", "certs"}

// chartDir and crdFiles are, under the repository root, the chart and the
// CRDs it installs from crds/.
const chartDir = "deploy/helm/gpud"

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	var o options
	var mtime int64
	fs.StringVar(&o.version, "version", "", "the release's version, SemVer without a v: 1.2.3 or 1.2.3-rc.1 (required)")
	fs.StringVar(&o.out, "out", "bin/release", "directory to write into (created)")
	fs.StringVar(&o.image, "image", "ghcr.io/gpud/gpud", "the image repository the manifests and chart deploy")
	fs.StringVar(&o.root, "root", ".", "the repository root")
	fs.Int64Var(&mtime, "mtime", 0, "modification time of the files written, Unix seconds (e.g. the commit's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see -h)", fs.Arg(0))
	}
	o.mtime = time.Unix(mtime, 0).UTC()
	if err := o.validate(); err != nil {
		return err
	}
	written, err := release(o)
	for _, w := range written {
		fmt.Fprintln(stdout, w)
	}
	return err
}

// semVer is SemVer 2.0.0's grammar (semver.org's regular expression),
// which Helm wants for a chart version and which is a valid image tag
// without build metadata.
var semVer = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?$`)

// imageRepo is a registry host (optionally with a port) and a path of
// lowercase components: the reference grammar less tag and digest.
var imageRepo = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)+$`)

func (o options) validate() error {
	var errs []error
	if o.version == "" {
		errs = append(errs, errors.New("--version is required: make release VERSION=1.2.3"))
	} else if !semVer.MatchString(o.version) || len(o.version) > 64 {
		errs = append(errs, fmt.Errorf("--version %q is not a SemVer version such as 1.2.3 or 1.2.3-rc.1 (no leading v): Helm and image tags need one", o.version))
	}
	if !imageRepo.MatchString(o.image) || len(o.image) > 200 {
		errs = append(errs, fmt.Errorf("--image %q is not an image repository such as ghcr.io/gpud/gpud (no tag)", o.image))
	}
	if o.out == "" {
		errs = append(errs, errors.New("--out is empty"))
	}
	return errors.Join(errs...)
}

// release writes the chart, the CRDs and the manifests; it returns the
// paths written.
func release(o options) ([]string, error) {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	var written []string
	tgz, crds, err := packageChart(o)
	if err != nil {
		return nil, err
	}
	written = append(written, tgz)
	crdPath := filepath.Join(o.out, "gpud-crds-"+o.version+".yaml")
	if err := writeFile(crdPath, crds, o.mtime); err != nil {
		return written, err
	}
	written = append(written, crdPath)
	ms, err := renderManifests(o)
	return append(written, ms...), err
}

// packageChart loads the chart as Helm does (following its symlinks),
// sets version and appVersion, points image.repository at o.image, and
// saves it; it also returns the chart's CRDs as one YAML stream.
func packageChart(o options) (string, []byte, error) {
	ch, err := loader.Load(filepath.Join(o.root, chartDir))
	if err != nil {
		return "", nil, fmt.Errorf("load chart: %w", err)
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = o.version, o.version
	for _, f := range ch.Raw {
		if f.Name == chartutil.ValuesfileName {
			data, err := setImageRepo(f.Data, o.image)
			if err != nil {
				return "", nil, err
			}
			f.Data = data
		}
	}
	setModTimes(ch, o.mtime)
	path, err := chartutil.Save(ch, o.out)
	if err != nil {
		return "", nil, fmt.Errorf("package chart: %w", err)
	}
	var crds []byte
	for _, c := range ch.CRDObjects() {
		crds = append(crds, []byte("---\n# "+c.Filename+"\n")...)
		crds = append(crds, c.File.Data...)
		if !strings.HasSuffix(string(c.File.Data), "\n") {
			crds = append(crds, '\n')
		}
	}
	if len(crds) == 0 {
		return "", nil, fmt.Errorf("chart %s has no CRDs in crds/", chartDir)
	}
	return path, crds, nil
}

// valuesRepo is values.yaml's image repository line.
var valuesRepo = regexp.MustCompile(`(?m)^(image:\n(?:  [^\n]*\n)*?  repository: ).*$`)

// setImageRepo sets image.repository in values.yaml's text (keeping its
// comments, which Helm shows with helm show values).
func setImageRepo(values []byte, repo string) ([]byte, error) {
	if !valuesRepo.Match(values) {
		return nil, errors.New("values.yaml: no image.repository line to set")
	}
	return valuesRepo.ReplaceAll(values, []byte("${1}"+repo)), nil
}

func setModTimes(ch *chart.Chart, t time.Time) {
	ch.ModTime, ch.SchemaModTime = t, t
	for _, fs := range [][]*common.File{ch.Raw, ch.Templates, ch.Files} {
		for _, f := range fs {
			f.ModTime = t
		}
	}
}

// imageRef is a gpud image reference in a manifest: the repository the
// sources name, any tag.
var imageRef = regexp.MustCompile(`ghcr\.io/gpud/gpud(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?`)

// renderManifests copies deploy/'s plain manifests (YAML and JSON, not
// tests or READMEs), every gpud image reference set to o.image:o.version.
func renderManifests(o options) ([]string, error) {
	var written []string
	ref := o.image + ":" + o.version
	for _, dir := range manifestDirs {
		src := filepath.Join(o.root, "deploy", dir)
		err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			ext := filepath.Ext(path)
			if ext != ".yaml" && ext != ".yml" && ext != ".json" {
				return nil
			}
			rel, err := filepath.Rel(filepath.Join(o.root, "deploy"), path)
			if err != nil {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			data = imageRef.ReplaceAll(data, []byte(ref))
			dst := filepath.Join(o.out, "manifests", rel)
			if err := writeFile(dst, data, o.mtime); err != nil {
				return err
			}
			written = append(written, dst)
			return nil
		})
		if err != nil {
			return written, fmt.Errorf("manifests in deploy/%s: %w", dir, err)
		}
	}
	return written, nil
}

func writeFile(path string, data []byte, mtime time.Time) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	return os.Chtimes(path, mtime, mtime)
}
