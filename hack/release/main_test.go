package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"sigs.k8s.io/yaml"
)

const root = "../.."

// imageLine finds every container image in a manifest.
var imageLine = regexp.MustCompile(`(?m)^\s*-?\s*image:\s*["']?([^\s"']+)`)

// gpudImages are a manifest's images of gpud (a repository ending
// gpud/gpud), tagged or not.
func gpudImages(data []byte) []string {
	var out []string
	for _, m := range imageLine.FindAllSubmatch(data, -1) {
		ref := string(m[1])
		if repo, _, _ := strings.Cut(strings.TrimPrefix(ref, "registry.example.com:5000/"), ":"); strings.HasSuffix(repo, "gpud/gpud") {
			out = append(out, ref)
		}
	}
	return out
}

// TestReleaseCarriesVersion writes a release and checks what a user
// installs from it: every gpud image in the plain manifests at the
// release's tag (none at :latest or another tag), the packaged chart at
// the release's version and appVersion with the image repository asked
// for, the CRD file holding the chart's CRDs, and the same bytes when
// written twice.
func TestReleaseCarriesVersion(t *testing.T) {
	const version = "1.2.3-rc.1"
	out := t.TempDir()
	var stdout bytes.Buffer
	if err := run([]string{"--version", version, "--out", out, "--root", root, "--image", "registry.example.com:5000/team/gpud/gpud", "--mtime", "1700000000"}, &stdout); err != nil {
		t.Fatal(err)
	}
	refs := 0
	err := filepath.WalkDir(filepath.Join(out, "manifests"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte(":latest")) {
			t.Errorf("%s names an image at :latest", path)
		}
		for _, m := range gpudImages(data) {
			refs++
			if want := "registry.example.com:5000/team/gpud/gpud:" + version; m != want {
				t.Errorf("%s: image %s, want %s", path, m, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// deploy/daemonset, deploy/dra and deploy/scheduler each run gpud.
	if refs < 3 {
		t.Errorf("%d gpud images in the manifests, want at least 3 (daemonset, dra, scheduler)", refs)
	}
	for _, want := range []string{"manifests/daemonset/daemonset.yaml", "manifests/dra/daemonset.yaml", "manifests/scheduler/deployment.yaml",
		"manifests/scheduler/kustomization.yaml", "manifests/monitoring/prometheusrule.yaml"} {
		if _, err := os.Stat(filepath.Join(out, want)); err != nil {
			t.Errorf("release lacks %s: %v", want, err)
		}
	}

	tgz := filepath.Join(out, "gpud-"+version+".tgz")
	ch, err := loader.Load(tgz)
	if err != nil {
		t.Fatalf("load the packaged chart: %v", err)
	}
	if ch.Metadata.Version != version || ch.Metadata.AppVersion != version {
		t.Errorf("chart version %q appVersion %q, want %q", ch.Metadata.Version, ch.Metadata.AppVersion, version)
	}
	var values map[string]any
	for _, f := range ch.Raw {
		if f.Name == chartutil.ValuesfileName {
			if err := yaml.Unmarshal(f.Data, &values); err != nil {
				t.Fatal(err)
			}
		}
	}
	img, _ := values["image"].(map[string]any)
	if img["repository"] != "registry.example.com:5000/team/gpud/gpud" || img["tag"] != "" {
		t.Errorf("values image %v, want the repository asked for and the tag empty (the appVersion)", img)
	}
	if len(ch.CRDObjects()) == 0 {
		t.Error("the packaged chart has no crds/")
	}

	crds, err := os.ReadFile(filepath.Join(out, "gpud-crds-"+version+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, "deploy/scheduler/podgroup-crd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(crds, src) {
		t.Error("gpud-crds.yaml does not hold deploy/scheduler/podgroup-crd.yaml")
	}

	again := t.TempDir()
	if err := run([]string{"--version", version, "--out", again, "--root", root, "--image", "registry.example.com:5000/team/gpud/gpud", "--mtime", "1700000000"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(tgz)
	b, _ := os.ReadFile(filepath.Join(again, "gpud-"+version+".tgz"))
	if !bytes.Equal(a, b) {
		t.Error("the chart archive differs between two runs with the same inputs")
	}
}

// TestSourceManifestsAtAppVersion checks deploy/'s plain manifests run the
// image `make image` builds and the chart deploys: the chart's appVersion,
// never :latest.
func TestSourceManifestsAtAppVersion(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "deploy/helm/gpud/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &meta); err != nil || meta.AppVersion == "" {
		t.Fatalf("Chart.yaml appVersion: %q, %v", meta.AppVersion, err)
	}
	want := "ghcr.io/gpud/gpud:" + meta.AppVersion
	refs := 0
	for _, dir := range manifestDirs {
		err := filepath.WalkDir(filepath.Join(root, "deploy", dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || (!strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".json")) {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range gpudImages(data) {
				refs++
				if m != want {
					t.Errorf("%s: image %s, want %s (the chart's appVersion)", path, m, want)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if refs < 3 {
		t.Errorf("%d gpud images in deploy/, want at least 3", refs)
	}
}

// TestBadOptions checks that a release with a bad version or image is
// refused before anything is written, naming the flag.
func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no version", nil, "--version is required"},
		{"leading v", []string{"--version", "v1.2.3"}, `--version "v1.2.3"`},
		{"two parts", []string{"--version", "1.2"}, `--version "1.2"`},
		{"latest", []string{"--version", "latest"}, `--version "latest"`},
		{"build metadata", []string{"--version", "1.2.3+abc"}, `--version "1.2.3+abc"`},
		{"image with tag", []string{"--version", "1.2.3", "--image", "ghcr.io/gpud/gpud:1.0"}, `--image "ghcr.io/gpud/gpud:1.0"`},
		{"argument", []string{"--version", "1.2.3", "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			err := run(append(tc.args, "--out", out, "--root", root), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run(%q) = %v, want an error saying %s", tc.args, err, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Error("wrote output despite the error")
			}
		})
	}
}
