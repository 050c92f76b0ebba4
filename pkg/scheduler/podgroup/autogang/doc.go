// Package autogang groups the pods of the workloads users already run
// into gangs without a hand-written PodGroup: batch Jobs, JobSets,
// LeaderWorkerSets, Kubeflow training jobs (PyTorchJob, MPIJob, TFJob,
// XGBoostJob, PaddleJob, JAXJob; a Kubeflow Trainer TrainJob through the
// JobSet it runs as) and Ray clusters (a RayJob through its RayCluster).
// It reads what KAI-Scheduler's podgrouper reads: the pod's controller
// owner chain (Pod → Job → JobSet ...) and the operators' well-known
// labels, as the unstructured objects the dynamic client returns, so no
// operator's Go module is imported.
//
// [Resolve] is pure: the pod's metadata and a [Lookup] over objects
// already read in, to the pod's [Gang] (key, minimum, kind) or none.
// Fields it reads are bounded: a count that is negative, not an integer
// or above [MaxMinMember] refuses the gang with a reason naming the
// object and the field ([Gang.Invalid]); the pods then wait with that
// reason rather than start one by one. [Prune] drops what Resolve never
// reads (pod templates, status but the Job's succeeded count, managed
// fields) so an informer keeps little.
//
// The rules, per kind (the first owner in the chain, from the top, that
// has one decides; annotation [GangAnnotation] "false" on it turns
// grouping off, [MinMemberAnnotation] lowers the minimum for an elastic
// gang):
//
//   - JobSet (jobset.x-k8s.io): one gang of Σ replicas × min(parallelism,
//     completions) over spec.replicatedJobs; with startupPolicyOrder
//     InOrder, one gang per replicated job (the later ones are created
//     only once the earlier run, so one gang of all would never start).
//   - LeaderWorkerSet (leaderworkerset.x-k8s.io): one gang per group
//     (label leaderworkerset.sigs.k8s.io/group-index) of the group's size
//     (the pod's leaderworkerset.sigs.k8s.io/size annotation, else
//     spec.leaderWorkerTemplate.size); with startupPolicy LeaderReady the
//     leader is placed alone and its workers, created once it is ready,
//     are a gang of size-1.
//   - Kubeflow jobs (kubeflow.org): spec.runPolicy.schedulingPolicy.minAvailable
//     when set, else the sum of the replica specs' replicas (1 when unset).
//   - RayCluster (ray.io): the head plus, per worker group not suspended,
//     (minReplicas when above 0, else replicas) × numOfHosts.
//   - batch/v1 Job, alone (not in a JobSet): a gang of min(parallelism,
//     completions − status.succeeded) when completionMode is Indexed, or
//     when the Job's [GangAnnotation] is "true". A NonIndexed Job's pods
//     are independent by default, as KAI and Kueue treat them: a work
//     queue's pods each make progress alone, and waiting for all of them
//     would only delay work; an Indexed Job is how Kubernetes runs
//     distributed training (each index a rank) and is a gang.
//
// A gang of one pod is no gang: Resolve reports none. Gang keys are
// "<namespace>/<kind>:<name>[:<part>]"; a PodGroup name cannot contain
// ':', so they never collide with a PodGroup's "namespace/name".
//
// This package imports only the standard library.
package autogang
