// Package agentevents is the node agent's Kubernetes Events: what the
// agent did or saw that a user looks for in `kubectl describe pod` or
// `kubectl describe node` — a GPU turning unhealthy or healthy again, the
// memory watchdog flagging or killing a pod's processes, a container's
// driver-enforced GPU memory limits set or refused, a MIG layout change.
//
// It owns the agent's events.k8s.io/v1 Events (reporting controller
// "gpud-agent", reporting instance the node name) and offers a typed
// method per event, named by what happened, so components never build
// Event objects. Each event is rate limited per object and reason, and
// per node ([Limits]): a flood of Xids on one GPU or of watchdog kills in
// one pod costs the API server a few writes, not one per occurrence.
// Events go through a bounded queue to one writer ([Recorder.Run]), so a
// slow API server never blocks the component that reports.
//
// A nil *Recorder records nothing, so a component wired without an API
// client (device-plugin mode without a kubeconfig, or --kube-events=false)
// calls the same methods.
package agentevents
