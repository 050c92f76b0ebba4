package heal

import (
	"fmt"
	"strings"
)

// Annotation is the pod annotation choosing what happens to the pod when
// one of its GPUs fails: "evict" (the default), "delete" or "keep".
const Annotation = "gpud.io/on-gpu-failure"

// Action is what is done to a pod on a failed GPU.
type Action string

// Actions.
const (
	// Evict goes through the Eviction API: PodDisruptionBudgets and the
	// pod's grace period hold.
	Evict Action = "evict"
	// Delete deletes the pod (its grace period holds, budgets do not).
	Delete Action = "delete"
	// Keep leaves the pod running on the failed GPU.
	Keep Action = "keep"
)

// maxQuote bounds how much of a bad value an error repeats.
const maxQuote = 32

// ParseAction parses an [Annotation] value; "" (absent) is def. Case and
// surrounding spaces are ignored. A bad value is an error that names the
// annotation and the values it takes.
func ParseAction(s string, def Action) (Action, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if len(t) > 16 {
		t = ""
		s = quote(s)
	}
	switch Action(t) {
	case Evict, Delete, Keep:
		return Action(t), nil
	}
	if strings.TrimSpace(s) == "" {
		return def, nil
	}
	return def, fmt.Errorf("annotation %s %q is not one of evict, delete, keep; %s applies until it is fixed", Annotation, quote(s), def)
}

func quote(s string) string {
	if len(s) > maxQuote {
		return s[:maxQuote] + "..."
	}
	return s
}

// Validate reports whether a is a valid default action (evict or
// delete; keep as a default would turn healing off, which the caller
// does with its own switch).
func (a Action) Validate() error {
	switch a {
	case Evict, Delete:
		return nil
	}
	return fmt.Errorf("heal: default action %q: want evict or delete", quote(string(a)))
}
