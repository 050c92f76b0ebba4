package manifest

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	resourceapi "k8s.io/api/resource/v1"
)

func TestDecode(t *testing.T) {
	objs, err := Decode([]byte(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: gpud}
---
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.gpud.io}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].Doc != 0 || objs[1].Doc != 2 {
		t.Fatalf("got %+v, want docs 0 and 2", objs)
	}
	if ds, ok := objs[0].Object.(*appsv1.DaemonSet); !ok || ds.Name != "gpud" {
		t.Errorf("doc 0: %T %+v, want the DaemonSet gpud", objs[0].Object, objs[0].Object)
	}
	if _, err := Decode([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: 1}}}]\n")); err != nil {
		t.Errorf("a valid pod: %v", err)
	}
	if _, ok := objs[1].Object.(*resourceapi.DeviceClass); !ok {
		t.Errorf("doc 2: %T, want a DeviceClass", objs[1].Object)
	}
}

// TestDecodeInto decodes a type outside client-go's scheme by the same
// rules.
func TestDecodeInto(t *testing.T) {
	var ds appsv1.DaemonSet
	if err := DecodeInto([]byte("metadata: {name: gpud}\nspec: {minReadySeconds: 3}\n"), &ds); err != nil || ds.Name != "gpud" || ds.Spec.MinReadySeconds != 3 {
		t.Fatalf("DecodeInto = %v, %+v", err, ds)
	}
	for doc, want := range map[string]string{
		"metadata: {Name: gpud}\n":       `unknown field "metadata.Name"`,
		"metadata: {name: a}\nspce: 1\n": `unknown field "spce"`,
		"a: 1\na: 2\n":                   "already defined",
	} {
		if err := DecodeInto([]byte(doc), &ds); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeInto(%q) = %v, want %q", doc, err, want)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ doc, want string }{
		"typo":                 {"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspce: {}\n", `unknown field "spce"`},
		"duplicate key":        {"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nmetadata: {name: b}\n", "already defined"},
		"wrong type":           {"apiVersion: v1\nkind: Pod\nmetadata: {name: 3}\n", "cannot unmarshal"},
		"unknown kind":         {"apiVersion: v1\nkind: Podd\nmetadata: {name: a}\n", "Podd"},
		"unknown nested field": {"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, imagee: i}]\n", `unknown field "spec.containers[0].imagee"`},
		"field name case":      {"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  hostPId: true\n  containers: [{name: c, image: i}]\n", `unknown field "spec.hostPId"`},
		"second doc":           {"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\nkind: Pod\n", "doc 1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
