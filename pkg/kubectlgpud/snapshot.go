package kubectlgpud

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/pkg/scheduler/queues"
)

// MaxObjects bounds every list [Load] makes, per kind: a cluster with more
// pods (or claims, slices, nodes) than this is refused rather than read
// into memory; narrow it with a namespace.
const MaxObjects = 200_000

// pageSize is the list page ([metav1.ListOptions.Limit]).
const pageSize = 500

// Snapshot is what the commands read from the API server.
type Snapshot struct {
	Nodes   []*corev1.Node
	Pods    []*corev1.Pod
	Slices  []*resourceapi.ResourceSlice
	Claims  []*resourceapi.ResourceClaim
	Classes []*resourceapi.DeviceClass
	// Events are the events about one pod ([Why]); empty otherwise.
	Events []*corev1.Event
	// Queues are the Queue objects ([LoadQueues]); QueuesRead says they
	// were listed (false: not asked for, the CRD is not installed, or
	// RBAC forbids it).
	Queues     []*queues.Queue
	QueuesRead bool
	// NamespaceQueues are the namespaces an admin bound to a queue by
	// the label gpud.io/queue (queues.NamespaceLabel), with the label's
	// value ([LoadNamespaces]); NamespacesRead says they were listed
	// (false: not asked for, or RBAC forbids it).
	NamespaceQueues map[string]string
	NamespacesRead  bool
	// Notes says what could not be read (RBAC) and what that leaves out.
	Notes []string
}

// Need says what [Load] reads.
type Need struct {
	// PodsNamespace and ClaimsNamespace limit pods and claims to one
	// namespace; "" is all.
	PodsNamespace, ClaimsNamespace string
	// Fallback, if set, is the namespace to read pods and claims in when
	// RBAC forbids reading them in all namespaces (noted).
	Fallback string
	// Nodes, Pods, DRA (ResourceSlices, claims, DeviceClasses).
	Nodes, Pods, DRA bool
	// Optional kinds that RBAC forbids are noted and left out instead of
	// failing the command.
	OptionalNodes, OptionalDRA bool
	// EventsFor, if set, reads the events about this pod.
	EventsFor *corev1.Pod
}

// Load lists what need asks for, page by page. A list that RBAC forbids
// fails the command, naming the resource, unless need makes it optional.
func Load(ctx context.Context, cs kubernetes.Interface, need Need) (*Snapshot, error) {
	s := &Snapshot{}
	optional := func(kind string, err error, opt bool, what string) error {
		if opt && (apierrors.IsForbidden(err) || apierrors.IsNotFound(err)) {
			s.Notes = append(s.Notes, fmt.Sprintf("cannot list %s (%s): %s", kind, reasonOf(err), what))
			return nil
		}
		return err
	}
	if need.Nodes {
		nodes, err := list(ctx, "nodes", func(o metav1.ListOptions) ([]corev1.Node, string, error) {
			l, err := cs.CoreV1().Nodes().List(ctx, o)
			if err != nil {
				return nil, "", err
			}
			return l.Items, l.Continue, nil
		})
		if err = optional("nodes", err, need.OptionalNodes, "device-plugin GPUs are not shown"); err != nil {
			return nil, err
		}
		s.Nodes = nodes
	}
	if need.Pods {
		listPods := func(ns string) ([]*corev1.Pod, error) {
			return list(ctx, "pods", func(o metav1.ListOptions) ([]corev1.Pod, string, error) {
				l, err := cs.CoreV1().Pods(ns).List(ctx, o)
				if err != nil {
					return nil, "", err
				}
				return l.Items, l.Continue, nil
			})
		}
		pods, err := listPods(need.PodsNamespace)
		if need.PodsNamespace == "" && need.Fallback != "" && apierrors.IsForbidden(err) {
			s.Notes = append(s.Notes, fmt.Sprintf("cannot list pods in all namespaces (Forbidden): only namespace %s's are counted", need.Fallback))
			pods, err = listPods(need.Fallback)
		}
		if err != nil {
			return nil, err
		}
		s.Pods = pods
	}
	if need.DRA {
		slices, err := list(ctx, "resourceslices.resource.k8s.io", func(o metav1.ListOptions) ([]resourceapi.ResourceSlice, string, error) {
			l, err := cs.ResourceV1().ResourceSlices().List(ctx, o)
			if err != nil {
				return nil, "", err
			}
			return l.Items, l.Continue, nil
		})
		if err = optional("resourceslices.resource.k8s.io", err, need.OptionalDRA, "DRA devices are shown by GPU index, without model, profile or memory"); err != nil {
			return nil, err
		}
		s.Slices = slices
		listClaims := func(ns string) ([]*resourceapi.ResourceClaim, error) {
			return list(ctx, "resourceclaims.resource.k8s.io", func(o metav1.ListOptions) ([]resourceapi.ResourceClaim, string, error) {
				l, err := cs.ResourceV1().ResourceClaims(ns).List(ctx, o)
				if err != nil {
					return nil, "", err
				}
				return l.Items, l.Continue, nil
			})
		}
		claims, err := listClaims(need.ClaimsNamespace)
		if need.ClaimsNamespace == "" && need.Fallback != "" && apierrors.IsForbidden(err) {
			s.Notes = append(s.Notes, fmt.Sprintf("cannot list resourceclaims in all namespaces (Forbidden): only namespace %s's count as used", need.Fallback))
			claims, err = listClaims(need.Fallback)
		}
		if err != nil {
			return nil, err
		}
		s.Claims = claims
		classes, err := list(ctx, "deviceclasses.resource.k8s.io", func(o metav1.ListOptions) ([]resourceapi.DeviceClass, string, error) {
			l, err := cs.ResourceV1().DeviceClasses().List(ctx, o)
			if err != nil {
				return nil, "", err
			}
			return l.Items, l.Continue, nil
		})
		if err = optional("deviceclasses.resource.k8s.io", err, need.OptionalDRA, "pending claims are not explained"); err != nil {
			return nil, err
		}
		s.Classes = classes
	}
	if p := need.EventsFor; p != nil {
		sel := fields.OneTermEqualSelector("involvedObject.uid", string(p.UID)).String()
		events, err := list(ctx, "events", func(o metav1.ListOptions) ([]corev1.Event, string, error) {
			o.FieldSelector = sel
			l, err := cs.CoreV1().Events(p.Namespace).List(ctx, o)
			if err != nil {
				return nil, "", err
			}
			return l.Items, l.Continue, nil
		})
		if err = optional("events", err, true, "the scheduler's events are not shown"); err != nil {
			return nil, err
		}
		// The selector is applied again: not every server (nor a fake)
		// filters on it.
		for _, e := range events {
			if e.InvolvedObject.UID == p.UID || (e.InvolvedObject.UID == "" && e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == p.Name) {
				s.Events = append(s.Events, e)
			}
		}
	}
	return s, nil
}

// list reads every page of a list, at most MaxObjects items.
func list[T any](ctx context.Context, kind string, page func(metav1.ListOptions) ([]T, string, error)) ([]*T, error) {
	var out []*T
	opts := metav1.ListOptions{Limit: pageSize}
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("list %s: %w", kind, err)
		}
		items, cont, err := page(opts)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", kind, err)
		}
		for i := range items {
			out = append(out, &items[i])
		}
		if len(out) > MaxObjects {
			return nil, fmt.Errorf("list %s: %w: more than %d; narrow it with -n NAMESPACE", kind, ErrTooMany, MaxObjects)
		}
		if cont == "" {
			return out, nil
		}
		opts.Continue = cont
	}
}

// reasonOf is an API error's reason ("Forbidden") for a note.
func reasonOf(err error) string {
	if r := apierrors.ReasonForError(err); r != metav1.StatusReasonUnknown {
		return string(r)
	}
	return err.Error()
}
