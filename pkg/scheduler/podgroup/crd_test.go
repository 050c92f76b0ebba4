package podgroup

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// crdPath is the shipped CRD, relative to this package.
const crdPath = "../../../deploy/scheduler/podgroup-crd.yaml"

type schemaProp struct {
	Type       string                `json:"type"`
	Format     string                `json:"format"`
	Properties map[string]schemaProp `json:"properties"`
}

// TestCRDMatchesTypes checks that deploy/scheduler/podgroup-crd.yaml
// serves exactly the fields the Go types carry, with int32 formats where
// the types are int32 (the real API server checks the manifest itself in
// test/podgroup_test.go).
func TestCRDMatchesTypes(t *testing.T) {
	data, err := os.ReadFile(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, d := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			docs = append(docs, d)
		}
	}
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents, want 1", crdPath, len(docs))
	}
	js, err := yaml.YAMLToJSON(docs[0])
	if err != nil {
		t.Fatalf("%s: %v", crdPath, err)
	}
	var crd struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Group string `json:"group"`
			Names struct {
				Kind, Plural, ListKind string
			} `json:"names"`
			Scope    string `json:"scope"`
			Versions []struct {
				Name         string `json:"name"`
				Served       bool   `json:"served"`
				Storage      bool   `json:"storage"`
				Subresources struct {
					Status *struct{} `json:"status"`
				} `json:"subresources"`
				Schema struct {
					OpenAPIV3Schema schemaProp `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(js, &crd); err != nil {
		t.Fatal(err)
	}
	s := crd.Spec
	if crd.APIVersion != "apiextensions.k8s.io/v1" || crd.Kind != "CustomResourceDefinition" ||
		crd.Metadata.Name != Resource+"."+Group || s.Group != Group || s.Names.Kind != Kind ||
		s.Names.Plural != Resource || s.Names.ListKind != "PodGroupList" || s.Scope != "Namespaced" {
		t.Fatalf("CRD identity = %+v", crd)
	}
	if len(s.Versions) != 1 || s.Versions[0].Name != Version || !s.Versions[0].Served || !s.Versions[0].Storage ||
		s.Versions[0].Subresources.Status == nil {
		t.Fatalf("CRD versions = %+v, want v1alpha1 served, storage, with /status", s.Versions)
	}
	root := s.Versions[0].Schema.OpenAPIV3Schema.Properties
	for name, typ := range map[string]reflect.Type{"spec": reflect.TypeFor[Spec](), "status": reflect.TypeFor[Status]()} {
		props := root[name].Properties
		var inSchema, inGo []string
		for k := range props {
			inSchema = append(inSchema, k)
		}
		for f := range typ.Fields() {
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			inGo = append(inGo, tag)
			if f.Type.Kind() == reflect.Int32 && (props[tag].Type != "integer" || props[tag].Format != "int32") {
				t.Errorf("%s.%s: schema %+v, want integer/int32", name, tag, props[tag])
			}
		}
		slices.Sort(inSchema)
		slices.Sort(inGo)
		if !slices.Equal(inSchema, inGo) {
			t.Errorf("%s: CRD fields %v, Go fields %v", name, inSchema, inGo)
		}
	}
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}
