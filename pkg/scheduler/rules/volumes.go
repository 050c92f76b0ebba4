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
// It is [Cycle.ReserveVolumes] then [VolumeReservation.Bind].
func (c *Cycle) BindVolumes(ctx context.Context, pod *corev1.Pod, node string, timeout time.Duration) error {
	r, err := c.ReserveVolumes(ctx, pod, node)
	if err != nil || r == nil {
		return err
	}
	return r.Bind(ctx, timeout)
}

// VolumeReservation is a pod's volumes reserved for a node (the
// VolumeBinding plugin's Reserve: its assume cache holds the chosen PVs
// and provisioning decisions, so later decisions see them taken) and not
// yet bound. Call Bind or Unreserve once; both may run on any goroutine,
// after the cycle that reserved ended.
type VolumeReservation struct {
	vb    *volumebinding.VolumeBinding
	state fwk.CycleState
	pod   *corev1.Pod
	node  string
	log   klog.Logger
}

// ReserveVolumes checks that the pod's PersistentVolumeClaims can be
// bound on node and reserves them there, as kube-scheduler's
// VolumeBinding Filter and Reserve do within its scheduling cycle: it
// writes nothing and waits for nothing. It returns nil, nil when there is
// nothing to bind (no claims, or all bound, or no volume rules).
func (c *Cycle) ReserveVolumes(ctx context.Context, pod *corev1.Pod, node string) (*VolumeReservation, error) {
	vb := c.r.volumeBinding()
	if vb == nil {
		return nil, nil
	}
	ni, err := c.snap.NodeInfos().Get(node)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, ErrNoNode)
	}
	ctx = klog.NewContext(ctx, c.log)
	// The plugin binds for the pod as kube-scheduler assumed it: on node.
	assumed := pod.DeepCopy()
	assumed.Spec.NodeName = node
	pod = assumed
	state := framework.NewCycleState()
	if _, st := vb.PreFilter(ctx, state, pod, []fwk.NodeInfo{ni}); st.IsSkip() {
		return nil, nil // no PersistentVolumeClaims
	} else if !st.IsSuccess() {
		return nil, fmt.Errorf("volumes of %s/%s: %s: %w", pod.Namespace, pod.Name, reason(st), ErrVolumes)
	}
	if st := vb.Filter(ctx, state, pod, ni); !st.IsSuccess() {
		return nil, fmt.Errorf("volumes of %s/%s on node %s: %s: %w", pod.Namespace, pod.Name, node, reason(st), ErrVolumes)
	}
	if st := vb.Reserve(ctx, state, pod, node); !st.IsSuccess() {
		vb.Unreserve(ctx, state, pod, node)
		return nil, fmt.Errorf("volumes of %s/%s on node %s: %s: %w", pod.Namespace, pod.Name, node, reason(st), ErrVolumes)
	}
	return &VolumeReservation{vb: vb, state: state, pod: pod, node: node, log: c.log}, nil
}

// Bind binds the reserved volumes (VolumeBinding's PreBind: the API
// writes, then the wait of up to timeout for the volume controller or a
// provisioner); on failure the reservation is undone and the error says
// why. A nil reservation binds nothing.
func (r *VolumeReservation) Bind(ctx context.Context, timeout time.Duration) error {
	if r == nil {
		return nil
	}
	ctx = klog.NewContext(ctx, r.log)
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if st := r.vb.PreBind(bctx, r.state, r.pod, r.node); !st.IsSuccess() {
		r.vb.Unreserve(ctx, r.state, r.pod, r.node)
		why := reason(st)
		if bctx.Err() != nil {
			why = fmt.Sprintf("not bound within %s (the volume controller or the provisioner has not finished): %s", timeout, why)
		}
		return fmt.Errorf("volumes of %s/%s on node %s: %s: %w", r.pod.Namespace, r.pod.Name, r.node, why, ErrVolumes)
	}
	return nil
}

// Unreserve undoes the reservation without binding (the pod is not bound
// to the node after all). A nil reservation does nothing.
func (r *VolumeReservation) Unreserve(ctx context.Context) {
	if r == nil {
		return
	}
	r.vb.Unreserve(klog.NewContext(ctx, r.log), r.state, r.pod, r.node)
}

// volumeBinding is the VolumeBinding plugin the frameworks share (built
// once, see once), or nil before the first framework.
func (r *Rules) volumeBinding() *volumebinding.VolumeBinding {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.vb
}
