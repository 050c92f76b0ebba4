// Package allocator is gpud's cluster placement core: given the free
// resources of a set of GPU nodes and one request (CPU, memory, whole GPUs or
// a fraction of one GPU, GPU-model constraints) it decides on which node and
// which GPUs the request goes, or says why it does not fit.
//
// The package is pure: no I/O, no clock, no goroutines and no logging. Every
// random choice is drawn from a caller-supplied *rand.Rand, so a run is
// deterministic for a seed. It imports only the standard library.
//
// # Policies
//
// The baselines of Weng et al., "Beware of Fragmentation: Scheduling
// GPU-Sharing Workloads with Fragmentation Gradient Descent" (USENIX ATC'23),
// are reproduced as their simulator scores them: [PolicyRandom],
// [PolicyDotProd], [PolicyGpuClustering], [PolicyGpuPacking],
// [PolicyBestFit] and [PolicyFGD]. [PolicyGpud] is gpud's own default.
//
// Scores of all nodes that pass the filter are compared; ties are broken
// uniformly at random (reservoir sampling, as kube-scheduler's selectHost).
package allocator
