// Package rules runs kube-scheduler's own placement rules for gpud
// scheduler: the PreFilter, Filter, PreScore and Score extension points of
// the in-tree plugins of k8s.io/kubernetes/pkg/scheduler/framework/plugins
// (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodePorts,
// NodeResourcesFit, InterPodAffinity, PodTopologySpread, VolumeRestrictions,
// VolumeBinding, VolumeZone and NodeVolumeLimits), driven by the upstream
// framework runtime over an upstream snapshot of the cluster. Nothing of
// kube-scheduler's semantics is rewritten here: this package only feeds the
// plugins and reads their verdicts back.
//
// It has one job: say which nodes a pod's rules allow, why the others are
// refused, and how the pod's preferences rank the allowed ones. Which of
// the allowed nodes and devices a pod gets stays gpud's policy
// (pkg/scheduler/decide over pkg/allocator); claims stay with
// pkg/scheduler/view.
//
// [Rules] is built once per scheduler, before its informer factory starts
// (the volume plugins register their listers on it). [Rules.Cycle] takes
// the nodes and bound pods one decision cycle sees; [Cycle.Add] and
// [Cycle.Remove] keep the cycle's snapshot in step with the pods the cycle
// places and the what-ifs that release running pods, so that pods placed
// earlier in a cycle count for later ones (ports, anti-affinity, spread).
// A Cycle is used by one goroutine.
//
// [Cycle.Rejected] names the plugins that refused a pod on every node of
// a cycle (what-ifs that release running pods aside), and [Rules.MayHelp]
// asks those plugins' queueing hints (kube-scheduler's EnqueueExtensions)
// whether a cluster event may make the pod schedulable, so that the
// runtime's backoff wakes such a pod on the events that can help it only.
package rules
