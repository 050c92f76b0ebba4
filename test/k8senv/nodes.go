package k8senv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// DefaultNodeCapacity is what CreateNode gives a node, as capacity and
// allocatable: room for any test's pods.
var DefaultNodeCapacity = corev1.ResourceList{
	corev1.ResourceCPU:              resource.MustParse("64"),
	corev1.ResourceMemory:           resource.MustParse("512Gi"),
	corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
	corev1.ResourcePods:             resource.MustParse("110"),
}

// CreateNode registers a Node object as a kubelet would: labels (plus the
// well-known hostname, os and arch labels), DefaultNodeCapacity, status
// Ready, no taints. mutate, when given, changes the node before it is
// created (its Status is written after creation through the status
// subresource), for instance to add extended resources such as
// nvidia.com/gpu to Status.Capacity and Status.Allocatable.
//
// There is no node lifecycle controller in the environment, so the node
// stays Ready without heartbeats and the scheduler may place pods on it at
// once.
func (e *Env) CreateNode(t testing.TB, name string, labels map[string]string, mutate ...func(*corev1.Node)) *corev1.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelHostname:   name,
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: "amd64",
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    DefaultNodeCapacity.DeepCopy(),
			Allocatable: DefaultNodeCapacity.DeepCopy(),
			Conditions: []corev1.NodeCondition{{
				Type:               corev1.NodeReady,
				Status:             corev1.ConditionTrue,
				Reason:             "KubeletReady",
				Message:            "k8senv: node object without a kubelet",
				LastHeartbeatTime:  metav1.Now(),
				LastTransitionTime: metav1.Now(),
			}},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
				{Type: corev1.NodeHostName, Address: name},
			},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:  KubeVersion(),
				OperatingSystem: "linux",
				Architecture:    "amd64",
			},
		},
	}
	for k, v := range labels {
		node.Labels[k] = v
	}
	for _, m := range mutate {
		m(node)
	}
	status := node.Status
	created, err := e.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("k8senv: create node %s: %v", name, err)
	}
	if len(created.Spec.Taints) > 0 && len(node.Spec.Taints) == 0 {
		// An admission plugin tainted the new node (TaintNodesByCondition
		// when a caller re-enabled it); nothing would lift the taint.
		created.Spec.Taints = nil
		if created, err = e.Client.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("k8senv: untaint node %s: %v", name, err)
		}
	}
	created.Status = status
	created, err = e.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("k8senv: set status of node %s: %v", name, err)
	}
	return created
}

// WaitForPodBound waits until the scheduler has bound pod namespace/name
// to a node and returns the node's name. On timeout it fails t with the
// pod's PodScheduled condition and its events (the scheduler's reasons).
func (e *Env) WaitForPodBound(t testing.TB, namespace, name string, timeout time.Duration) string {
	t.Helper()
	var pod *corev1.Pod
	err := waitFor(nil, fmt.Sprintf("pod %s/%s to be bound to a node", namespace, name), timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p, err := e.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod = p
		if p.Spec.NodeName == "" {
			return fmt.Errorf("not bound yet")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, e.DescribePod(namespace, name))
	}
	return pod.Spec.NodeName
}

// WaitForPodUnschedulable waits until the scheduler has given up on pod
// namespace/name for now (PodScheduled=False, reason Unschedulable) and
// returns its message ("0/1 nodes are available: ..."). It fails t when the
// pod is bound instead, or on timeout.
func (e *Env) WaitForPodUnschedulable(t testing.TB, namespace, name string, timeout time.Duration) string {
	t.Helper()
	return e.WaitForPodUnschedulableWith(t, namespace, name, timeout)
}

// WaitForPodUnschedulableWith is WaitForPodUnschedulable for a message
// holding every one of want: a reason that changes as the cluster does (a
// gang's members arriving one by one) is waited out until it names them.
func (e *Env) WaitForPodUnschedulableWith(t testing.TB, namespace, name string, timeout time.Duration, want ...string) string {
	t.Helper()
	var msg string
	err := waitFor(nil, fmt.Sprintf("pod %s/%s to be marked unschedulable with %q", namespace, name, want), timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p, err := e.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("k8senv: pod %s/%s was bound to node %s, want it unschedulable", namespace, name, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				msg = c.Message
				for _, w := range want {
					if !strings.Contains(msg, w) {
						return fmt.Errorf("unschedulable with %q so far", msg)
					}
				}
				return nil
			}
		}
		return fmt.Errorf("no PodScheduled=False/Unschedulable condition yet")
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, e.DescribePod(namespace, name))
	}
	return msg
}

// DescribePod summarizes what the API server knows about a pod's
// scheduling: node, phase, conditions and events.
func (e *Env) DescribePod(namespace, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	pod, err := e.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		fmt.Fprintf(&b, "pod %s/%s: %v\n", namespace, name, err)
	} else {
		fmt.Fprintf(&b, "pod %s/%s: node %q, phase %q, scheduler %q\n", namespace, name, pod.Spec.NodeName, pod.Status.Phase, pod.Spec.SchedulerName)
		for _, c := range pod.Status.Conditions {
			fmt.Fprintf(&b, "  condition %s=%s reason=%q message=%q\n", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	events, err := e.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": name}.String(),
	})
	if err != nil {
		fmt.Fprintf(&b, "  events: %v\n", err)
	} else {
		for _, ev := range events.Items {
			fmt.Fprintf(&b, "  event %s %s (%s): %s\n", ev.Type, ev.Reason, ev.Source.Component+ev.ReportingController, ev.Message)
		}
	}
	return b.String()
}
