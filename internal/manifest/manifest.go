// Package manifest decodes the Kubernetes manifests gpud ships (deploy/)
// strictly into their k8s.io/api types, the way `kubectl apply` with strict
// field validation reads them: a typo in a field name, a duplicate key or a
// kind the API does not know is an error naming the file and document.
package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/goccy/go-yaml"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	sigsjson "sigs.k8s.io/json"

	"github.com/gpud/gpud/internal/fileio"
)

// Object is one document of a manifest file.
type Object struct {
	Doc    int            // the document's position in its file, from 0
	Object runtime.Object // a typed k8s.io/api object (*appsv1.DaemonSet, ...)
}

// DecodeFile reads path (capped) and decodes its documents; see Decode.
func DecodeFile(path string) ([]Object, error) {
	data, err := fileio.ReadFile(path, fileio.MaxConfigBytes)
	if err != nil {
		return nil, err
	}
	objs, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}

// Decode splits data into YAML documents and decodes each into the type
// client-go's scheme has for its apiVersion and kind. Each document goes
// through goccy/go-yaml to JSON (duplicate keys are errors there), then into
// the type with unknown fields and trailing data refused. Empty documents
// are skipped.
func Decode(data []byte) ([]Object, error) {
	var out []Object
	for i, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, err := decodeDoc(doc)
		if err != nil {
			return nil, fmt.Errorf("doc %d: %w", i, err)
		}
		out = append(out, Object{Doc: i, Object: obj})
	}
	return out, nil
}

func decodeDoc(doc []byte) (runtime.Object, error) {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, err
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("apiVersion %q: %w", tm.APIVersion, err)
	}
	obj, err := scheme.Scheme.New(gv.WithKind(tm.Kind))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", tm.APIVersion, tm.Kind, err)
	}
	if err := strictJSON(js, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}

// DecodeInto decodes one YAML document strictly into v, for types outside
// client-go's scheme (a CRD's Go type, the Prometheus Operator's): the same
// rules as Decode.
func DecodeInto(doc []byte, v any) error {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	return strictJSON(js, v)
}

// strictJSON decodes js into v as the API server's strict field validation
// does: field names are case-sensitive (encoding/json alone would take
// hostPId for hostPID), unknown and duplicate fields are errors, and
// trailing data is refused.
func strictJSON(js []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	var one json.RawMessage
	if err := dec.Decode(&one); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the object")
	}
	strict, err := sigsjson.UnmarshalStrict(one, v)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}
