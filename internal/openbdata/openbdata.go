// Package openbdata locates Alibaba's openb GPU trace, which tests and
// benchmarks read by path and the repository never copies.
package openbdata

import (
	"os"
	"path/filepath"
)

// EnvDir names an environment variable that overrides the trace directory.
const EnvDir = "GPUD_OPENB_DIR"

// InRepo is where `make traces` downloads the trace, relative to the
// module root (git-ignored).
var InRepo = filepath.Join("data", "openb-gpu-v2023")

// rel is where the trace sits relative to the module root's parent.
var rel = filepath.Join("shared", "data", "openb-gpu-v2023")

// Dir returns the trace directory: $GPUD_OPENB_DIR when set, else
// ../shared/data/openb-gpu-v2023 beside the module root (found by walking up
// from the working directory to go.mod), else data/openb-gpu-v2023 in the
// module root (where `make traces` puts it), else /work/shared/data/... when
// that exists. Callers skip when the files are absent; the path returned
// then is the one to put them at.
func Dir() string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	beside, inRepo := "", ""
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				beside = filepath.Join(filepath.Dir(dir), rel)
				inRepo = filepath.Join(dir, InRepo)
				break
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	if beside != "" && exists(beside) {
		return beside
	}
	if inRepo != "" && exists(inRepo) {
		return inRepo
	}
	if fallback := filepath.Join("/work", rel); exists(fallback) {
		return fallback
	}
	return beside
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
