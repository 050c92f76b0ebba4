// Package podgroup is gpud scheduler's input for gangs: the PodGroup of
// kubernetes-sigs/scheduler-plugins (scheduling.x-k8s.io/v1alpha1, the
// coscheduling CRD in deploy/scheduler/podgroup-crd.yaml, so users keep
// their manifests) and Kubernetes 1.37's own scheduling.k8s.io/v1beta1
// PodGroup (feature gate GenericWorkload), both turned into
// [plan.Group] values keyed "namespace/name".
//
// The runtime (pkg/scheduler) asks [Installed] and [InTreeInstalled]
// once at start, runs [NewInformer] and/or [NewInTreeInformer] for what
// is served, reads [Groups] each cycle and maps each pod to its group
// with [KeyOf]. Objects that do not convert are left out with a reason
// naming them; they never stop the scheduler.
//
// The package reads the API server only through the clients and
// informers it is given; it writes nothing (PodGroup status belongs to
// scheduler-plugins' controller).
package podgroup
