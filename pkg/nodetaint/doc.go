// Package nodetaint taints the agent's Node when its GPUs keep failing:
// a GPU that fails again after it recovered, or MaxGPUs GPUs failing
// within Window, put the NoSchedule taint [TaintKey] on the Node (its
// value says which: [ValueRepeated] or [ValueMultiple]; the annotation
// [ReasonAnnotation] says which GPUs and why), as NVIDIA's NVSentinel
// cordons a node for remediation. The taint is removed once every GPU of
// the node stayed healthy for ClearAfter. Optionally (NoExecuteAfter), a
// node tainted that long with a GPU still failing gets the NoExecute
// taint of the same key and value too, evicting the pods left on it; it
// goes with the NoSchedule one.
//
// A [Tracker] is the pure core (health observations and the time in, the
// wanted taint out: no I/O, clock or goroutines); a [Syncer] runs it in
// the agent on the discovery store's inventory and writes the Node
// (JSON patch guarded by the Node's resourceVersion, so other taints are
// never lost). The agent's admission policy (deploy/dra/rbac.yaml) lets
// it change this taint alone.
package nodetaint
