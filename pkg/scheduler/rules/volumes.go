package rules

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/volumebinding"
)

// VolumeBindTimeout bounds how long [Cycle.BindVolumes] waits for the
// persistent volume controller or a provisioner to finish binding; a pod
// not bound by then waits for a later cycle, which finds its claims bound
// (or provisioning under way on the node chosen).
const VolumeBindTimeout = 10 * time.Second

// BindVolumes binds the pod's unbound WaitForFirstConsumer
// PersistentVolumeClaims for node, as kube-scheduler's VolumeBinding does
// in Reserve and PreBind (its own code: a matching static PV is bound to
// the claim, a claim to provision gets the
// volume.kubernetes.io/selected-node annotation), and waits up to timeout
// for the binding to complete. It does nothing for pods whose claims are
// all bound (or that have none). On failure what it reserved is undone
// and the error says why; the pod must not be bound to node then.
func (c *Cycle) BindVolumes(ctx context.Context, pod *corev1.Pod, node string, timeout time.Duration) error {
	vb := c.r.volumeBinding()
	if vb == nil {
		return nil
	}
	ni, err := c.snap.NodeInfos().Get(node)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, ErrNoNode)
	}
	ctx = klog.NewContext(ctx, c.log)
	// The plugin binds for the pod as kube-scheduler assumed it: on node.
	assumed := pod.DeepCopy()
	assumed.Spec.NodeName = node
	pod = assumed
	state := framework.NewCycleState()
	if _, st := vb.PreFilter(ctx, state, pod, []fwk.NodeInfo{ni}); st.IsSkip() {
		return nil // no PersistentVolumeClaims
	} else if !st.IsSuccess() {
		return fmt.Errorf("volumes of %s/%s: %s: %w", pod.Namespace, pod.Name, reason(st), ErrVolumes)
	}
	if st := vb.Filter(ctx, state, pod, ni); !st.IsSuccess() {
		return fmt.Errorf("volumes of %s/%s on node %s: %s: %w", pod.Namespace, pod.Name, node, reason(st), ErrVolumes)
	}
	if st := vb.Reserve(ctx, state, pod, node); !st.IsSuccess() {
		vb.Unreserve(ctx, state, pod, node)
		return fmt.Errorf("volumes of %s/%s on node %s: %s: %w", pod.Namespace, pod.Name, node, reason(st), ErrVolumes)
	}
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if st := vb.PreBind(bctx, state, pod, node); !st.IsSuccess() {
		vb.Unreserve(ctx, state, pod, node)
		why := reason(st)
		if bctx.Err() != nil {
			why = fmt.Sprintf("not bound within %s (the volume controller or the provisioner has not finished): %s", timeout, why)
		}
		return fmt.Errorf("volumes of %s/%s on node %s: %s: %w", pod.Namespace, pod.Name, node, why, ErrVolumes)
	}
	return nil
}

// volumeBinding is the VolumeBinding plugin the frameworks share (built
// once, see once), or nil before the first framework.
func (r *Rules) volumeBinding() *volumebinding.VolumeBinding {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.vb
}
