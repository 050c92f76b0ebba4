package schedbench

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/internal/testkit/schedtest"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/trace"
)

const podCSV = `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0000,12000,16384,1,1000,,LS,Running,30,100,30
openb-pod-0001,6000,12288,1,460,,LS,Running,10,100,10
openb-pod-0002,4000,8192,0,0,,BE,Running,20,100,20
openb-pod-0003,88000,327680,8,1000,,LS,Running,20,100,20
`

func readPods(t *testing.T) []trace.Pod {
	t.Helper()
	pods, err := trace.ReadPods(strings.NewReader(podCSV), "inline")
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

func TestSample(t *testing.T) {
	pods := readPods(t)
	all := Sample(pods, 100, 1)
	var names []string
	for _, p := range all {
		names = append(names, p.Name)
	}
	// Trace order: creation time, then list order.
	want := []string{"openb-pod-0001", "openb-pod-0002", "openb-pod-0003", "openb-pod-0000"}
	if !slices.Equal(names, want) {
		t.Fatalf("Sample(all) = %v, want %v", names, want)
	}
	a, b := Sample(pods, 2, 7), Sample(pods, 2, 7)
	if len(a) != 2 || !slices.EqualFunc(a, b, func(x, y trace.Pod) bool { return x.Name == y.Name }) {
		t.Fatalf("Sample is not deterministic: %v vs %v", a, b)
	}
	if got := GPUDemand(all); math.Abs(got-(1+0.46+8)) > 1e-9 {
		t.Fatalf("GPUDemand = %v, want 9.46", got)
	}
}

func TestPickNodes(t *testing.T) {
	nodes := []trace.Node{
		{Name: "openb-node-0001", CPUMilli: 64000, MemoryMiB: 262144, NumGPU: 2, Model: "P100"},
		{Name: "openb-node-0002", CPUMilli: 96000, MemoryMiB: 393216, NumGPU: 8, Model: "G2"},
		{Name: "openb-node-0003", CPUMilli: 32000, MemoryMiB: 131072},
		{Name: "openb-node-0004", CPUMilli: 64000, MemoryMiB: 262144, NumGPU: 4, Model: "T4"},
	}
	got := PickNodes(nodes, 3, 1)
	gpus := 0
	for _, n := range got {
		if n.NumGPU == 0 {
			t.Fatalf("PickNodes picked CPU-only node %s", n.Name)
		}
		gpus += n.NumGPU
	}
	if gpus < 3 || !slices.IsSortedFunc(got, func(a, b trace.Node) int { return strings.Compare(a.Name, b.Name) }) {
		t.Fatalf("PickNodes(3 GPUs) = %v", got)
	}
	if all := PickNodes(nodes, 1000, 1); len(all) != 3 {
		t.Fatalf("PickNodes(1000 GPUs) = %d nodes, want the 3 GPU nodes", len(all))
	}
	pods := []trace.Pod{
		{Name: "fits-g2", CPUMilli: 90000, MemoryMiB: 300000, NumGPU: 8, GPUMilli: 1000},
		{Name: "too-much-cpu", CPUMilli: 120000, MemoryMiB: 1000, NumGPU: 1, GPUMilli: 1000},
		{Name: "too-many-gpus", CPUMilli: 1000, MemoryMiB: 1000, NumGPU: 8, GPUMilli: 1000},
	}
	fit := Fitting(pods[:2], nodes)
	if len(fit) != 1 || fit[0].Name != "fits-g2" {
		t.Fatalf("Fitting = %v, want fits-g2", fit)
	}
	if fit := Fitting(pods[2:], nodes[:1]); len(fit) != 0 {
		t.Fatalf("Fitting(8 GPUs on a 2-GPU node) = %v", fit)
	}
}

func TestClaim(t *testing.T) {
	byName := map[string]trace.Pod{}
	for _, p := range readPods(t) {
		byName[p.Name] = p
	}
	// pkg/trace rejects this row; Claim must too.
	byName["openb-pod-0004"] = trace.Pod{Name: "openb-pod-0004", CPUMilli: 8000, MemoryMiB: 8192, NumGPU: 2, GPUMilli: 500}
	tests := []struct {
		name    string
		pod     string
		count   int64
		memory  string // "" = no capacity request
		noClaim bool
		wantErr bool
	}{
		{name: "whole GPU", pod: "openb-pod-0000", count: 1},
		{name: "share rounds up to the 1Gi step", pod: "openb-pod-0001", count: 1, memory: "15Gi"}, // 0.46 x 32Gi = 14.72Gi
		{name: "eight GPUs", pod: "openb-pod-0003", count: 8},
		{name: "CPU only", pod: "openb-pod-0002", noClaim: true},
		{name: "shares on two GPUs", pod: "openb-pod-0004", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := byName[tc.pod]
			c, err := Claim(p, "ns")
			if (err != nil) != tc.wantErr {
				t.Fatalf("Claim() error = %v, want error %t", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			pod := Pod(p, "ns", "gpud-scheduler", c)
			if pod.Spec.SchedulerName != "gpud-scheduler" || pod.Name != tc.pod {
				t.Fatalf("pod %s scheduler %q", pod.Name, pod.Spec.SchedulerName)
			}
			if got := pod.Spec.Containers[0].Resources.Requests.Cpu().MilliValue(); got != p.CPUMilli {
				t.Fatalf("pod CPU request %dm, want %dm", got, p.CPUMilli)
			}
			if tc.noClaim {
				if c != nil || len(pod.Spec.ResourceClaims) != 0 {
					t.Fatalf("CPU-only pod got claim %v", c)
				}
				return
			}
			if len(pod.Spec.ResourceClaims) != 1 || *pod.Spec.ResourceClaims[0].ResourceClaimName != c.Name ||
				pod.Spec.Containers[0].Resources.Claims[0].Name != pod.Spec.ResourceClaims[0].Name {
				t.Fatalf("pod does not reference claim %s: %+v", c.Name, pod.Spec.ResourceClaims)
			}
			req := c.Spec.Devices.Requests[0].Exactly
			if req.DeviceClassName != ClassGPU || req.Count != tc.count || req.AllocationMode != resourceapi.DeviceAllocationModeExactCount {
				t.Fatalf("request %+v, want %d of %s", req, tc.count, ClassGPU)
			}
			switch {
			case tc.memory == "" && req.Capacity != nil:
				t.Fatalf("whole-GPU request has capacity %v", req.Capacity)
			case tc.memory != "":
				got := req.Capacity.Requests[dra.CapacityMemory]
				if want := resource.MustParse(tc.memory); got.Cmp(want) != 0 {
					t.Fatalf("memory request %s, want %s", got.String(), tc.memory)
				}
			}
		})
	}
}

func TestSlicesShareable(t *testing.T) {
	n := trace.Node{Name: "OpenB-Node-0007", CPUMilli: 96000, MemoryMiB: 393216, NumGPU: 8, Model: "G2"}
	sl, err := Slices(n)
	if err != nil {
		t.Fatal(err)
	}
	var devices []resourceapi.Device
	for _, s := range sl {
		if s.Spec.Driver != dra.DriverName || s.Spec.Pool.Name != "openb-node-0007" || *s.Spec.NodeName != "openb-node-0007" {
			t.Fatalf("slice %s: driver %s pool %s", s.Name, s.Spec.Driver, s.Spec.Pool.Name)
		}
		devices = append(devices, s.Spec.Devices...)
	}
	if len(devices) != 8 {
		t.Fatalf("%d devices, want 8", len(devices))
	}
	for _, d := range devices {
		mem := d.Capacity[dra.CapacityMemory]
		if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations || mem.Value.Value() != GPUMemoryBytes ||
			mem.RequestPolicy == nil || mem.RequestPolicy.ValidRange.Step.Value() != memoryStepBytes {
			t.Fatalf("device %s is not a shareable %d-byte GPU with a 1Gi step: %+v", d.Name, GPUMemoryBytes, d)
		}
		if *d.Attributes["productName"].StringValue != "G2" {
			t.Fatalf("device %s productName %v", d.Name, d.Attributes["productName"])
		}
	}
	node := NodeObject(n)
	if node.Name != "openb-node-0007" || node.Status.Allocatable.Cpu().MilliValue() != 96000 {
		t.Fatalf("node %s allocatable %v", node.Name, node.Status.Allocatable)
	}
}

func TestUnallocatedPercent(t *testing.T) {
	result := func(pool, dev, mem string) resourceapi.DeviceRequestAllocationResult {
		r := resourceapi.DeviceRequestAllocationResult{Driver: dra.DriverName, Pool: pool, Device: dev, Request: "gpu"}
		if mem != "" {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{dra.CapacityMemory: resource.MustParse(mem)}
		}
		return r
	}
	claim := func(rs ...resourceapi.DeviceRequestAllocationResult) resourceapi.ResourceClaim {
		return resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: rs}}}}
	}
	claims := []resourceapi.ResourceClaim{
		claim(result("a", "gpu-0", ""), result("a", "gpu-1", "")), // two whole GPUs
		claim(result("a", "gpu-2", "16Gi")),                       // half
		claim(result("a", "gpu-2", "8Gi")),                        // a quarter of the same GPU
		{},                                                        // pending
	}
	pct, over := UnallocatedPercent(claims, 4)
	if want := 100 * (4 - 2.75) / 4; math.Abs(pct-want) > 1e-9 || over != 0 {
		t.Fatalf("UnallocatedPercent = %v, %d; want %v, 0", pct, over, want)
	}
	claims = append(claims, claim(result("a", "gpu-2", "16Gi")))
	if _, over := UnallocatedPercent(claims, 4); over != 1 {
		t.Fatalf("over-allocated devices = %d, want 1", over)
	}
}

func TestTable(t *testing.T) {
	out := Table([]Result{
		{Scheduler: "gpud scheduler", Pods: 10, Bound: 11, FirstBind: time.Second, LastBind: 2 * time.Second, Unallocated: 5, FedBound: 10, FirstFailure: "y"},
		{Scheduler: "kube-scheduler", Pods: 10, Bound: 11, FirstBind: time.Second, LastBind: 3 * time.Second, Unallocated: 12.5, FedBound: 9, FirstFailure: "x"},
	})
	for _, want := range []string{"5.0", "10.0", "2.00", "12.50"} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}
	if got := Count90(11); got != 10 {
		t.Fatalf("Count90(11) = %d, want 10", got)
	}
	r := Result{Bound: 11, FirstBind: time.Second, Bind90: 4 * time.Second}
	if got := r.PodsPerSecond90(); got != 3 {
		t.Fatalf("PodsPerSecond90 = %v, want 3 (9 pods after the first in 3s)", got)
	}
}

func TestShippedClasses(t *testing.T) {
	classes, err := schedtest.ReadClasses(schedtest.ShippedClassesPath())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range classes {
		names = append(names, c.Name)
	}
	if !slices.Contains(names, ClassGPU) {
		t.Fatalf("classes %v lack %s", names, ClassGPU)
	}
}

// Constrain picks whole groups of 4 consecutive pods, about the share
// asked, the same for a seed, each group all anti-affine or all spread.
func TestConstrain(t *testing.T) {
	if got := Constrain(100, 0, 42); len(got) != 0 {
		t.Fatalf("share 0 constrained %d pods", len(got))
	}
	a, b := Constrain(4000, 0.2, 42), Constrain(4000, 0.2, 42)
	if len(a) != len(b) || len(a)%ConstraintGroupSize != 0 || len(a) < 600 || len(a) > 1000 {
		t.Fatalf("constrained %d and %d of 4000 pods at share 0.2 (want the same, whole groups, about 800)", len(a), len(b))
	}
	kinds := map[string]int{}
	for start := 0; start < 4000; start += ConstraintGroupSize {
		if a[start] == nil {
			continue
		}
		var first string
		for i := start; i < start+ConstraintGroupSize; i++ {
			if a[i] == nil {
				t.Fatalf("group at %d has no change for pod %d", start, i)
			}
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}}}
			a[i](p)
			kind := "spread"
			if p.Spec.Affinity != nil && p.Spec.Affinity.PodAntiAffinity != nil {
				kind = "anti"
			}
			if first == "" {
				first = kind
			} else if kind != first {
				t.Fatalf("group at %d mixes %s and %s", start, first, kind)
			}
			if p.Labels["schedbench-group"] == "" {
				t.Fatalf("pod %d has no group label", i)
			}
		}
		kinds[first]++
	}
	if kinds["anti"] == 0 || kinds["spread"] == 0 {
		t.Fatalf("groups by kind %v, want both", kinds)
	}
}
