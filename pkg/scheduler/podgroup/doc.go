// Package podgroup is gpud scheduler's input for gangs: the PodGroup of
// kubernetes-sigs/scheduler-plugins (scheduling.x-k8s.io/v1alpha1, the
// coscheduling CRD in deploy/scheduler/podgroup-crd.yaml, so users keep
// their manifests) and Kubernetes 1.37's own scheduling.k8s.io/v1beta1
// PodGroup (feature gate GenericWorkload), both turned into
// [plan.Group] values keyed "namespace/name".
//
// This package only converts: the objects it is given ([FromObjects],
// [FromUnstructured], [FromInTree]) become groups, and [KeyOf] maps a pod
// to its group. Objects that do not convert are left out with a reason
// naming them; they never stop the scheduler. Watching the API server is
// pgwatch's: the scheduler asks it once at start which PodGroup APIs are
// served, runs its informers and reads its Groups each cycle. Nothing
// here writes (PodGroup status belongs to scheduler-plugins' controller).
package podgroup
