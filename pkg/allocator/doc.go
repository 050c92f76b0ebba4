// Package allocator is gpud's cluster placement core: given the free
// resources of a set of GPU nodes and one request it decides on which node
// and which GPUs the request goes, or says why it does not fit.
//
// A request asks for CPU and memory and either no GPU, whole GPUs, a
// fraction of one GPU (milli-GPU, or GPU memory MiB plus a cores
// percentage), or one MIG slice by profile name. It may restrict the GPUs by
// model ("V100M16|V100M32"), minimum memory and minimum compute capability.
// Multi-GPU requests are kept within one NVLink domain of a node when they
// fit in one (GPU label [LabelNVLinkDomain]).
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
// [PolicyBestFit] and [PolicyFGD]. [PolicyGpud] is gpud's own default: FGD's
// fragmentation gradient, measured per GPU model over the GPUs each typical
// pod can use, plus CPU-stranding (per GPU model), CPU-only and packing
// terms (see gpud.go), which leaves fewer GPUs unallocated than FGD on every
// openb trace and on GPU-model-constrained and multi-GPU-heavy workloads
// derived from them (pkg/tracefamily). MIG slices are placed alike by every
// policy: best fit on the GPU with the fewest free slices; the
// fragmentation measure counts free slices no typical slice can use.
//
// A cluster may hold any number of kinds of GPU (model, memory, compute
// capability, MIG mode).
//
// Scores of all nodes that pass the filter are compared; ties are broken
// uniformly at random (reservoir sampling, as kube-scheduler's selectHost),
// or by a fixed node order ([Allocator.SetTieOrder]).
package allocator
