package test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/test/k8senv"
)

// selectedNode is the annotation kube-scheduler's VolumeBinding sets on a
// claim to be provisioned for the node it chose.
const selectedNode = "volume.kubernetes.io/selected-node"

// testWaitForFirstConsumer runs, for both schedulers, a pod whose claim
// waits for its first consumer: one to be provisioned (StorageClass
// "fast", a provisioner that does not run here) and one a free local PV of
// node b can take. Both schedulers must do what VolumeBinding's PreBind
// does: annotate the first claim with the node chosen, bind node b's PV to
// the second (its pod then goes to node b); neither binds the pods, since
// no provisioner or PV controller finishes here.
func testWaitForFirstConsumer(t *testing.T, env *k8senv.Env) {
	c := env.Client
	ctx := t.Context()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := c.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"},
		Provisioner: "example.com/fake", VolumeBindingMode: &wffc}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim := func(ns, name, class string) {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(class),
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, pool := range []string{"gpud", "kube"} {
		ns := "rules-" + pool
		claim(ns, "scratch", "fast")
		claim(ns, "cache", "local")
		free := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "free-" + pool + "-b"},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName:       "local",
				PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/free"}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn,
						Values: []string{pool + "-b"}}}}}}},
			}}
		pv, err := c.CoreV1().PersistentVolumes().Create(ctx, free, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pv.Status.Phase = corev1.VolumeAvailable // as the PV controller (not running here) marks it
		if _, err := c.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		createRulesPod(t, env, pool, rulesPod{name: "provisioned", mod: vol("scratch")})
		createRulesPod(t, env, pool, rulesPod{name: "static", mod: vol("cache")})
	}
	for _, pool := range []string{"gpud", "kube"} {
		who := map[string]string{"gpud": "gpud scheduler", "kube": "kube-scheduler (oracle)"}[pool]
		ns := "rules-" + pool
		var node string
		testwait.For(t, 30*time.Second, who+": claim scratch annotated with the node chosen", func() bool {
			pvc, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "scratch", metav1.GetOptions{})
			node = pvc.Annotations[selectedNode]
			return err == nil && node != ""
		})
		if node != pool+"-a" && node != pool+"-b" {
			t.Errorf("%s: scratch's selected node %q is not one of the pool's", who, node)
		}
		testwait.For(t, 30*time.Second, who+": node b's free PV bound to claim cache", func() bool {
			pv, err := c.CoreV1().PersistentVolumes().Get(ctx, "free-"+pool+"-b", metav1.GetOptions{})
			return err == nil && pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Name == "cache" && pv.Spec.ClaimRef.Namespace == ns
		})
		for _, name := range []string{"provisioned", "static"} {
			if p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
				t.Errorf("%s: pod %s bound to %q before its volume was (err %v)", who, name, p.Spec.NodeName, err)
			}
		}
	}
	msg := podMessage(t, env, "rules-gpud", "provisioned")
	t.Logf("gpud scheduler's reason for the pod waiting on provisioning: %q", msg)
}
