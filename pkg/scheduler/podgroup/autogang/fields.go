package autogang

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// field returns the value at path in obj, and whether every step was a
// map holding the next key.
func field(obj map[string]any, path ...string) (any, bool) {
	var cur any = obj
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// str is the string at path ("" when absent); a value of another type is
// an error naming the field.
func str(obj map[string]any, path ...string) (string, error) {
	v, ok := field(obj, path...)
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s is %T, want a string", strings.Join(path, "."), v)
	}
	return s, nil
}

// count is the count at path: def when absent or null; an error naming
// the field when it is not an integer, negative or above MaxMinMember.
// Integers come as the dynamic client decodes them (int64), or as int,
// int32, json.Number or a float64 with no fraction.
func count(obj map[string]any, def int64, path ...string) (int64, error) {
	v, ok := field(obj, path...)
	if !ok || v == nil {
		return def, nil
	}
	name := strings.Join(path, ".")
	n, err := integer(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	if n < 0 || n > MaxMinMember {
		return 0, fmt.Errorf("%s %d is outside 0..%d", name, n, MaxMinMember)
	}
	return n, nil
}

func integer(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case float64:
		if n != math.Trunc(n) || math.IsInf(n, 0) || n > math.MaxInt64 || n < math.MinInt64 {
			return 0, fmt.Errorf("%v is not an integer", n)
		}
		return int64(n), nil
	case json.Number:
		i, err := n.Int64()
		if err != nil {
			return 0, fmt.Errorf("%q is not an integer", n.String())
		}
		return i, nil
	default:
		return 0, fmt.Errorf("is %T, want an integer", v)
	}
}

// countString parses a count written in an annotation: a decimal integer
// 1..MaxMinMember.
func countString(s string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 1 || n > MaxMinMember {
		return 0, fmt.Errorf("%q is not an integer in 1..%d", s, MaxMinMember)
	}
	return n, nil
}

// mul and add keep a gang's size within MaxMinMember (both arguments
// already are).
func mul(a, b int64) (int64, bool) {
	if a != 0 && b > MaxMinMember/a {
		return 0, false
	}
	return a * b, a*b <= MaxMinMember
}

func add(a, b int64) (int64, bool) { return a + b, a+b <= MaxMinMember }

// metaString is metadata.<key> of obj ("" when absent or not a string).
func metaString(obj map[string]any, key string) string {
	s, _ := str(obj, "metadata", key)
	return s
}

// metaMap is metadata.<key> (labels, annotations) as strings; values
// that are not strings are left out.
func metaMap(obj map[string]any, key string) map[string]string {
	v, _ := field(obj, "metadata", key)
	m, _ := v.(map[string]any)
	out := make(map[string]string, len(m))
	for k, x := range m {
		if s, ok := x.(string); ok {
			out[k] = s
		}
	}
	return out
}

// controllerOf is obj's controller owner reference (ownerReferences with
// controller: true), nil for none.
func controllerOf(obj map[string]any) *Ref {
	v, _ := field(obj, "metadata", "ownerReferences")
	list, _ := v.([]any)
	for _, x := range list {
		m, ok := x.(map[string]any)
		if !ok || m["controller"] != true {
			continue
		}
		r := &Ref{}
		r.APIVersion, _ = m["apiVersion"].(string)
		r.Kind, _ = m["kind"].(string)
		r.Name, _ = m["name"].(string)
		r.UID, _ = m["uid"].(string)
		if r.Kind == "" || r.Name == "" {
			return nil
		}
		return r
	}
	return nil
}

// Prune removes from obj, in place, what Resolve never reads: status
// (but status.succeeded, which a Job's rule reads), metadata.managedFields
// and every pod template (a "template" whose spec has containers), so
// that an informer of Jobs or JobSets keeps a few hundred bytes per
// object. It returns obj.
func Prune(obj map[string]any) map[string]any {
	if obj == nil {
		return nil
	}
	if st, ok := obj["status"].(map[string]any); ok {
		if s, ok := st["succeeded"]; ok {
			obj["status"] = map[string]any{"succeeded": s}
		} else {
			delete(obj, "status")
		}
	} else {
		delete(obj, "status")
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	if spec, ok := obj["spec"]; ok {
		pruneTemplates(spec, 0)
	}
	return obj
}

// maxDepth bounds Prune's walk (objects from the API server are far
// shallower; a fuzzer's are not).
const maxDepth = 32

func pruneTemplates(v any, depth int) {
	if depth > maxDepth {
		return
	}
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			if k == "template" && isPodTemplate(c) {
				delete(x, k)
				continue
			}
			pruneTemplates(c, depth+1)
		}
	case []any:
		for _, c := range x {
			pruneTemplates(c, depth+1)
		}
	}
}

func isPodTemplate(v any) bool {
	_, ok := field(map[string]any{"t": v}, "t", "spec", "containers")
	return ok
}
