package schedbench

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/internal/testkit/schedtest"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/trace"
)

// GPUMemoryBytes is every bench GPU's memory. The openb traces give a GPU
// model but no memory, and a pod's gpu_milli is a share of whichever GPU
// it lands on; with one memory size for all GPUs a share is one absolute
// memory request, as a DRA claim must state it. 32 GiB rounds a share up
// to the policy's 1 GiB step, 1/32 of a GPU (31.25 milli).
const GPUMemoryBytes = 32 << 30

// memoryStepBytes is the request step pkg/dra publishes for GPUMemoryBytes
// (memoryPolicy: 1 GiB when it divides the memory).
const memoryStepBytes = 1 << 30

// ClassGPU is the DeviceClass of whole GPUs and fractions
// (deploy/dra/deviceclasses.yaml).
const ClassGPU = "gpu.gpud.io"

// ClaimRequestName is the name of the one request in every bench claim, and
// of the pod's claim reference.
const ClaimRequestName = "gpu"

// Sample picks n of pods uniformly without replacement (all when n is not
// smaller than len(pods)), deterministically for seed, and returns them in
// trace order: by creation time, ties in list order. Pods the bench cannot
// express (a GPU count with a share below 1000 on more than one GPU) are
// left out of the draw.
func Sample(pods []trace.Pod, n int, seed uint64) []trace.Pod {
	type indexed struct {
		i int
		p trace.Pod
	}
	var pool []indexed
	for i, p := range pods {
		if Expressible(p) {
			pool = append(pool, indexed{i, p})
		}
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	r.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	if n < len(pool) {
		pool = pool[:n]
	}
	slices.SortFunc(pool, func(a, b indexed) int {
		return cmp.Or(cmp.Compare(a.p.CreationTime, b.p.CreationTime), cmp.Compare(a.i, b.i))
	})
	out := make([]trace.Pod, len(pool))
	for i, x := range pool {
		out[i] = x.p
	}
	return out
}

// Expressible reports whether p maps onto one claim: no GPU, n whole GPUs,
// or a share of one GPU.
func Expressible(p trace.Pod) bool {
	switch {
	case p.NumGPU == 0:
		return true
	case p.GPUMilli <= 0 || p.GPUMilli > 1000:
		return false
	case p.NumGPU > 1:
		return p.GPUMilli == 1000
	}
	return true
}

// GPUDemand is the GPUs pods ask for: whole GPUs count 1, a share its
// milli/1000.
func GPUDemand(pods []trace.Pod) float64 {
	var d float64
	for _, p := range pods {
		if p.NumGPU > 0 {
			d += float64(p.NumGPU) * float64(p.GPUMilli) / 1000
		}
	}
	return d
}

// PickNodes draws GPU nodes (deterministically for seed) until they hold at
// least gpus GPUs, and returns them sorted by name.
func PickNodes(nodes []trace.Node, gpus int, seed uint64) []trace.Node {
	var pool []trace.Node
	for _, n := range nodes {
		if n.NumGPU > 0 {
			pool = append(pool, n)
		}
	}
	r := rand.New(rand.NewPCG(seed, seed^0xbf58476d1ce4e5b9))
	r.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	var out []trace.Node
	total := 0
	for _, n := range pool {
		if total >= gpus {
			break
		}
		out = append(out, n)
		total += n.NumGPU
	}
	slices.SortFunc(out, func(a, b trace.Node) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Fitting returns the pods that fit on at least one of nodes when it is
// empty (CPU, memory and GPU count), so that a pod no state of the cluster
// could hold never counts as the first that did not fit.
func Fitting(pods []trace.Pod, nodes []trace.Node) []trace.Pod {
	var out []trace.Pod
	for _, p := range pods {
		for _, n := range nodes {
			if p.CPUMilli <= n.CPUMilli && p.MemoryMiB <= n.MemoryMiB && p.NumGPU <= n.NumGPU {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// NodeName is the Kubernetes name (and DRA pool name) of a trace node.
func NodeName(n trace.Node) string { return strings.ToLower(n.Name) }

// NodeObject is the Node a kubelet on n would register: its CPU and memory
// as capacity and allocatable, 110 pods, Ready.
func NodeObject(n trace.Node) *corev1.Node {
	name := NodeName(n)
	res := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(n.CPUMilli, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(n.MemoryMiB<<20, resource.BinarySI),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelHostname:     name,
			corev1.LabelOSStable:     "linux",
			corev1.LabelArchStable:   "amd64",
			"nvidia.com/gpu.product": n.Model,
			"nvidia.com/gpu.count":   fmt.Sprint(n.NumGPU),
		}},
		Status: corev1.NodeStatus{
			Capacity:    res,
			Allocatable: res.DeepCopy(),
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "schedbench: node object without a kubelet", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			}},
		},
	}
}

// Inventory is what discovery would report on n: NumGPU GPUs of the
// trace's model, GPUMemoryBytes each, healthy, MIG off.
func Inventory(n trace.Node) gpu.Inventory {
	name := NodeName(n)
	inv := gpu.Inventory{Node: gpu.Node{Name: name, DriverVersion: "550.54.15", CUDADriverVersion: "12.4"}}
	for i := range n.NumGPU {
		inv.GPUs = append(inv.GPUs, gpu.GPU{
			Index:       i,
			Minor:       i,
			UUID:        fmt.Sprintf("GPU-%s-%d", name, i),
			Name:        n.Model,
			MemoryBytes: GPUMemoryBytes,
			PCIBusID:    fmt.Sprintf("00000000:%02X:00.0", 0x10+i),
			NUMANode:    i * 2 / max(n.NumGPU, 1),
			Health:      gpu.Healthy,
		})
	}
	return inv
}

// Slices are the ResourceSlices gpud's agent publishes for n (pkg/dra's
// Build over [Inventory]), as its resourceslice controller writes them:
// driver gpu.gpud.io, pool and node n.
func Slices(n trace.Node) ([]*resourceapi.ResourceSlice, error) {
	name := NodeName(n)
	pub, err := dra.Build(name, dra.NodeState{Inventory: Inventory(n)})
	if err != nil {
		return nil, fmt.Errorf("schedbench: slices of %s: %w", name, err)
	}
	return schedtest.Slices(name, pub), nil
}

// ObjectName is the Kubernetes name of a trace pod and of its claim.
func ObjectName(p trace.Pod) string { return strings.ToLower(p.Name) }

// FractionMemory is the memory request for a share of milli/1000 of a GPU:
// that much of GPUMemoryBytes, rounded up to the request step.
func FractionMemory(milli int64) resource.Quantity {
	b := (milli*GPUMemoryBytes + 999) / 1000
	b = (b + memoryStepBytes - 1) / memoryStepBytes * memoryStepBytes
	return *resource.NewQuantity(b, resource.BinarySI)
}

// Claim is p's ResourceClaim, nil for a pod without GPUs: n whole GPUs of
// class gpu.gpud.io (as deploy/dra/examples/whole-gpu.yaml asks), or a
// share as a consumable-capacity memory request on one GPU
// (fraction-20gi.yaml).
func Claim(p trace.Pod, namespace string) (*resourceapi.ResourceClaim, error) {
	if !Expressible(p) {
		return nil, fmt.Errorf("schedbench: pod %s: %d GPUs at %d milli each is not one claim", p.Name, p.NumGPU, p.GPUMilli)
	}
	if p.NumGPU == 0 {
		return nil, nil
	}
	req := &resourceapi.ExactDeviceRequest{
		DeviceClassName: ClassGPU,
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
		Count:           int64(p.NumGPU),
	}
	if p.GPUMilli < 1000 {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			dra.CapacityMemory: FractionMemory(p.GPUMilli),
		}}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: ObjectName(p), Namespace: namespace},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: ClaimRequestName, Exactly: req}},
		}},
	}, nil
}

// Pod is p as a pod for schedulerName: its CPU and memory as requests and,
// when it has GPUs, claim (by name: the bench runs no claim-template
// controller).
func Pod(p trace.Pod, namespace, schedulerName string, claim *resourceapi.ResourceClaim) *corev1.Pod {
	c := corev1.Container{
		Name:  "main",
		Image: "registry.k8s.io/pause:3.10",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(p.CPUMilli, resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(p.MemoryMiB<<20, resource.BinarySI),
		}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ObjectName(p), Namespace: namespace, Labels: map[string]string{"app": "schedbench"}},
		Spec: corev1.PodSpec{
			SchedulerName:                 schedulerName,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{c},
		},
	}
	if claim != nil {
		name := claim.Name
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: ClaimRequestName, ResourceClaimName: &name}}
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: ClaimRequestName}}
	}
	return pod
}

// Share is the part of a GPU one allocation result holds: its consumed
// memory over the GPU's, or all of it when the result consumed no capacity
// (an exclusive allocation).
func Share(r resourceapi.DeviceRequestAllocationResult, gpuMemoryBytes int64) float64 {
	if q, ok := r.ConsumedCapacity[dra.CapacityMemory]; ok && gpuMemoryBytes > 0 {
		return min(float64(q.Value())/float64(gpuMemoryBytes), 1)
	}
	return 1
}

// Allocated sums the GPU shares claims hold per device ("pool/device").
func Allocated(claims []resourceapi.ResourceClaim, gpuMemoryBytes int64) map[string]float64 {
	out := map[string]float64{}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != dra.DriverName {
				continue
			}
			out[r.Pool+"/"+r.Device] += Share(r, gpuMemoryBytes)
		}
	}
	return out
}

// UnallocatedPercent is the GPU capacity claims leave unallocated, in
// percent of totalGPUs, and how many devices are allocated past a whole
// GPU (must be none).
func UnallocatedPercent(claims []resourceapi.ResourceClaim, totalGPUs int) (pct float64, over int) {
	var used float64
	for _, s := range Allocated(claims, GPUMemoryBytes) {
		used += min(s, 1)
		if s > 1+1e-9 {
			over++
		}
	}
	if totalGPUs == 0 {
		return 0, over
	}
	return 100 * (float64(totalGPUs) - used) / float64(totalGPUs), over
}

// ConstraintGroupSize is how many pods share one constraint group.
const ConstraintGroupSize = 4

// Constrain gives a share of the pods the placement rules real workloads
// carry, deterministically for seed: of the chosen pods, half are in
// groups of ConstraintGroupSize replicas with required pod anti-affinity
// on the hostname (one replica per node), half in groups spread with
// maxSkew 1 over hostnames (DoNotSchedule). Pods are chosen in consecutive
// runs of a group so that the replicas arrive together, as a Deployment's
// do. It returns, by pod index, the change to make to the pod.
func Constrain(n int, share float64, seed uint64) map[int]func(*corev1.Pod) {
	out := map[int]func(*corev1.Pod){}
	if share <= 0 {
		return out
	}
	r := rand.New(rand.NewPCG(seed^0x5bd1e995, seed))
	for start := 0; start+ConstraintGroupSize <= n; start += ConstraintGroupSize {
		if r.Float64() >= share {
			continue
		}
		group := fmt.Sprintf("g%d", start/ConstraintGroupSize)
		anti := r.IntN(2) == 0
		for i := start; i < start+ConstraintGroupSize; i++ {
			out[i] = func(p *corev1.Pod) {
				p.Labels["schedbench-group"] = group
				sel := &metav1.LabelSelector{MatchLabels: map[string]string{"schedbench-group": group}}
				if anti {
					p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: sel, TopologyKey: corev1.LabelHostname}}}}
					return
				}
				p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
					WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel}}
			}
		}
	}
	return out
}
