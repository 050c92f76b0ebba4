package decide

import (
	"strings"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// fitCache is what a cycle learns about fitting that holds for the rest
// of it: why a pod never fits (that depends on the pod and the nodes'
// sizes alone), lone pods' failures by shape (binds only fill the view,
// what-ifs are undone, so a shape that failed fails again), and the
// typical requests fragmentation is measured against.
type fitCache struct {
	// never caches neverFits by pod ("" fits somewhere).
	never map[*plan.Pod]string
	// memo holds lone pods' failures by shape (shapeKey).
	memo map[string]*failure
	// typical are the oldest pending pods' requests (typicalRequests).
	typical []allocator.Request
}

func newFitCache() fitCache {
	return fitCache{never: map[*plan.Pod]string{}, memo: map[string]*failure{}}
}

// remember keeps a lone pod's failure for pods of the same shape. Invalid
// claims are not kept (their messages name the claim), nor are gangs
// (key "").
func (f *fitCache) remember(key string, fl *failure) {
	if key == "" || fl == nil || fl.code == plan.CodeInvalid || strings.Contains(fl.msg, "claim ") {
		return
	}
	f.memo[key] = fl
}

// failed is the failure remembered for shape key, if any.
func (f *fitCache) failed(key string) (*failure, bool) {
	fl, ok := f.memo[key]
	return fl, ok
}

// neverOf is p's cached neverFits answer, if computed.
func (f *fitCache) neverOf(p *plan.Pod) (string, bool) {
	msg, ok := f.never[p]
	return msg, ok
}

// setNever caches p's neverFits answer.
func (f *fitCache) setNever(p *plan.Pod, msg string) { f.never[p] = msg }
