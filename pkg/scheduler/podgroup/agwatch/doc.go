// Package agwatch feeds the scheduler the gangs of workloads grouped by
// their owners (package autogang's rules): it asks discovery once, at
// start, which workload APIs the server serves (batch Jobs, JobSets,
// LeaderWorkerSets, Kubeflow training jobs, RayClusters), runs a dynamic
// informer over each (objects pruned to what the rules read), and gives
// each cycle a grouper mapping a pod to its gang. A workload API
// installed after the scheduler started is read after its next restart,
// as pgwatch does for PodGroups.
package agwatch
