package schedbench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	resourceapi "k8s.io/api/resource/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// ShippedClassesPath is deploy/dra/deviceclasses.yaml in the source tree
// this package was built from.
func ShippedClassesPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "dra", "deviceclasses.yaml")
}

// ReadClasses reads the DeviceClasses of a multi-document YAML file.
func ReadClasses(path string) ([]*resourceapi.DeviceClass, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("schedbench: device classes: %w", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*resourceapi.DeviceClass
	for {
		var c resourceapi.DeviceClass
		if err := dec.Decode(&c); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("schedbench: device classes in %s: %w", path, err)
		}
		if c.Kind == "DeviceClass" && c.Name != "" {
			out = append(out, &c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("schedbench: no DeviceClass in %s", path)
	}
	return out, nil
}
