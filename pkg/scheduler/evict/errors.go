package evict

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBudget is matched (errors.Is) by a *BudgetError: a
// PodDisruptionBudget forbids the eviction now.
var ErrBudget = errors.New("evict: a PodDisruptionBudget forbids the eviction")

// BudgetError is a refusal by the Eviction API because of
// PodDisruptionBudgets: none allows a disruption now (HTTP 429), a
// budget's status is stale or broken (429 or 403 with a DisruptionBudget
// cause), or more than one budget selects the pod (500; the Eviction API
// does not support that). Retrying later may succeed for the first two.
type BudgetError struct {
	// Pod is "namespace/name".
	Pod string
	// PDBs are the names (in Pod's namespace) of the budgets the API
	// server named; empty when it named none (several budgets).
	PDBs []string
	// Multiple is set when more than one budget selects the pod: the
	// Eviction API cannot evict it until the budgets are fixed, so a
	// retry does not help (Allowed names them).
	Multiple bool
	// Message is the API server's explanation.
	Message string
	// Err is the API server's error (an *apierrors.StatusError).
	Err error
}

func (e *BudgetError) Error() string {
	if e.Multiple {
		return fmt.Sprintf("evict %s: more than one PodDisruptionBudget selects the pod (%s); pick another victim, or leave one budget over it",
			e.Pod, e.Message)
	}
	who := "a PodDisruptionBudget"
	if len(e.PDBs) > 0 {
		who = "PodDisruptionBudget " + strings.Join(e.PDBs, ", ")
	}
	return fmt.Sprintf("evict %s: %s forbids it now (%s); pick another victim or retry when the budget allows",
		e.Pod, who, e.Message)
}

// Is makes errors.Is(err, ErrBudget) true.
func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

// Unwrap returns the API server's error.
func (e *BudgetError) Unwrap() error { return e.Err }
