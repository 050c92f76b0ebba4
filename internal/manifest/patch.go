package manifest

import (
	"encoding/json"
	"fmt"

	"github.com/goccy/go-yaml"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/gpud/gpud/internal/fileio"
)

// PatchFile applies the JSON patch (RFC 6902, written as YAML, as a
// kustomize overlay's patch file is) at patchPath to obj and decodes the
// result strictly into out, with the same rules as Decode.
func PatchFile(obj any, patchPath string, out any) error {
	orig, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	data, err := fileio.ReadFile(patchPath, fileio.MaxConfigBytes)
	if err != nil {
		return err
	}
	pj, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("%s: %w", patchPath, err)
	}
	patch, err := jsonpatch.DecodePatch(pj)
	if err != nil {
		return fmt.Errorf("%s: %w", patchPath, err)
	}
	res, err := patch.Apply(orig)
	if err != nil {
		return fmt.Errorf("%s: %w", patchPath, err)
	}
	if err := strictJSON(res, out); err != nil {
		return fmt.Errorf("%s applied: %w", patchPath, err)
	}
	return nil
}
