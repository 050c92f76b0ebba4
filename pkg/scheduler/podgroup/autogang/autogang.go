package autogang

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// MaxMinMember bounds every count Resolve reads and every gang it makes
// (podgroup.MaxMinMember, the bound on a hand-written PodGroup).
const MaxMinMember = 10000

// maxChain bounds the owner chain Resolve follows (Pod → Job → JobSet →
// TrainJob is the longest it needs).
const maxChain = 4

// Annotations a workload's owner may carry to change its grouping.
const (
	// GangAnnotation "false" on the workload (the JobSet, the Job, ...)
	// leaves its pods ungrouped; "true" makes a NonIndexed Job a gang.
	GangAnnotation = "gpud.io/gang"
	// MinMemberAnnotation sets a smaller minimum than the workload's
	// size (1..size): an elastic gang, whose first MinMember pods start
	// together and whose others are placed when room exists.
	MinMemberAnnotation = "gpud.io/gang-min-member"
	// TopologyAnnotation names the topology level the gang asks to be
	// placed within: nvlink, node, rack, zone, or a node label the
	// scheduler's --gang-topology-labels lists.
	TopologyAnnotation = "gpud.io/gang-topology"
	// TopologyModeAnnotation is "required" (the default: the whole gang
	// within one domain of the level, or it waits) or "preferred".
	TopologyModeAnnotation = "gpud.io/gang-topology-mode"
)

// Well-known labels and annotations the operators put on their pods.
const (
	LWSNameLabel         = "leaderworkerset.sigs.k8s.io/name"
	LWSGroupIndexLabel   = "leaderworkerset.sigs.k8s.io/group-index"
	LWSWorkerIndexLabel  = "leaderworkerset.sigs.k8s.io/worker-index"
	LWSSizeAnnotation    = "leaderworkerset.sigs.k8s.io/size"
	JobSetNameLabel      = "jobset.sigs.k8s.io/jobset-name"
	ReplicatedJobLabel   = "jobset.sigs.k8s.io/replicatedjob-name"
	maxLabelValue        = 63
	lwsLeaderWorkerIndex = "0"
)

// API groups and kinds Resolve knows.
const (
	BatchGroup    = "batch"
	JobSetGroup   = "jobset.x-k8s.io"
	LWSGroup      = "leaderworkerset.x-k8s.io"
	KubeflowGroup = "kubeflow.org"
	RayGroup      = "ray.io"

	KindJob        = "Job"
	KindJobSet     = "JobSet"
	KindLWS        = "LeaderWorkerSet"
	KindRayCluster = "RayCluster"
)

// KubeflowReplicaSpecs maps each Kubeflow training job kind to the spec
// field holding its replica specs.
var KubeflowReplicaSpecs = map[string]string{
	"PyTorchJob": "pytorchReplicaSpecs",
	"MPIJob":     "mpiReplicaSpecs",
	"TFJob":      "tfReplicaSpecs",
	"XGBoostJob": "xgbReplicaSpecs",
	"PaddleJob":  "paddleReplicaSpecs",
	"JAXJob":     "jaxReplicaSpecs",
}

// ErrInvalid is matched by the errors behind Gang.Invalid.
var ErrInvalid = errors.New("autogang: workload refused as a gang")

// Ref is an owner reference (or a label's reference to an object).
type Ref struct {
	// APIVersion is "group/version" ("batch/v1"); only the group is
	// compared.
	APIVersion, Kind, Name string
	// UID, when set, must match the object's metadata.uid: an owner
	// deleted and created again under the same name is another owner.
	UID string
}

// Group is the API group of r's APIVersion.
func (r Ref) Group() string {
	g, _, found := strings.Cut(r.APIVersion, "/")
	if !found {
		return "" // the core group ("v1")
	}
	return g
}

// Pod is what Resolve reads of a pod.
type Pod struct {
	Namespace           string
	Labels, Annotations map[string]string
	// Owner is the pod's controller owner reference; nil: none.
	Owner *Ref
}

// Lookup returns the object ref names in namespace, as the dynamic
// client decodes it, and whether ref's kind (by API group and kind) is
// watched at all. (nil, true) means the kind is watched but the object is
// not there (not yet seen, or deleted).
type Lookup func(namespace string, ref Ref) (obj map[string]any, watched bool)

// Gang is the gang a pod belongs to.
type Gang struct {
	Namespace string
	// Name is "<kind>:<object>[:<part>]" ("jobset:train",
	// "lws:serve:1", "jobset:pipeline:workers").
	Name string
	// Kind is the workload's kind ("JobSet").
	Kind string
	// MinMember pods must start together (2..MaxMinMember), unless
	// Invalid is set.
	MinMember int32
	// Created is the workload's creationTimestamp (zero if unreadable).
	Created time.Time
	// Invalid, if set, says why the workload cannot be grouped as
	// written, or that its owner is not seen yet; its pods wait with it.
	Invalid string
	// Topology holds the workload's TopologyAnnotation and
	// TopologyModeAnnotation, those it sets, as written (the scheduler
	// validates them); nil when it sets neither.
	Topology map[string]string
	// Object names the workload in reasons ("JobSet default/train").
	Object string
}

// Key is the gang's key among the scheduler's groups: "namespace/name".
func (g Gang) Key() string { return g.Namespace + "/" + g.Name }

// Resolve returns the gang of pod, and false when the pod is not in one
// (no known owner, a workload of one pod, or grouping turned off). It
// reads the pod's owner chain through get, up to maxChain owners, and
// LeaderWorkerSet labels. Resolve does not look at a pod's PodGroup: the
// caller gives an explicit PodGroup precedence.
func Resolve(pod Pod, get Lookup) (Gang, bool) {
	if get == nil {
		return Gang{}, false
	}
	if name := pod.Labels[LWSNameLabel]; name != "" {
		obj, watched := get(pod.Namespace, Ref{APIVersion: LWSGroup + "/v1", Kind: KindLWS, Name: name})
		if watched {
			return lwsGang(pod, name, obj)
		}
	}
	var chain []map[string]any
	ref := pod.Owner
	for ref != nil && len(chain) < maxChain {
		obj, watched := get(pod.Namespace, *ref)
		if !watched {
			break
		}
		if obj == nil || (ref.UID != "" && metaString(obj, "uid") != ref.UID) {
			return waiting(pod.Namespace, *ref), true
		}
		chain = append(chain, obj)
		ref = controllerOf(obj)
	}
	// The topmost owner with a rule decides.
	for i := len(chain) - 1; i >= 0; i-- {
		obj := chain[i]
		kind := kindOf(obj)
		var (
			g  Gang
			ok bool
		)
		switch {
		case kind == KindJobSet:
			g, ok = jobSetGang(pod, obj, chain[:i])
		case kind == KindRayCluster:
			g, ok = rayGang(obj)
		case KubeflowReplicaSpecs[kind] != "":
			g, ok = kubeflowGang(obj, kind)
		case kind == KindJob:
			g, ok = jobGang(obj)
		default:
			continue
		}
		return finish(g, ok, obj, pod.Namespace)
	}
	return Gang{}, false
}

// finish applies the owner's annotations and fills in what every rule
// shares.
func finish(g Gang, ok bool, obj map[string]any, ns string) (Gang, bool) {
	if !ok {
		return Gang{}, false
	}
	g.Namespace = ns
	if ts := metaString(obj, "creationTimestamp"); ts != "" {
		g.Created, _ = time.Parse(time.RFC3339, ts)
	}
	if g.Invalid != "" {
		return g, true
	}
	ann := metaMap(obj, "annotations")
	g.Object = id(obj)
	for _, k := range []string{TopologyAnnotation, TopologyModeAnnotation} {
		if v, set := ann[k]; set {
			if g.Topology == nil {
				g.Topology = map[string]string{}
			}
			g.Topology[k] = v
		}
	}
	if v, set := ann[MinMemberAnnotation]; set {
		n, err := countString(v)
		switch {
		case err != nil:
			return refuse(g, obj, "annotation %s: %v; want the number of pods that must start together", MinMemberAnnotation, err), true
		case n > int64(g.MinMember):
			return refuse(g, obj, "annotation %s %d is above the workload's %d pods", MinMemberAnnotation, n, g.MinMember), true
		}
		g.MinMember = int32(n)
	}
	if g.MinMember < 2 {
		return Gang{}, false
	}
	return g, true
}

// gangSwitch reads GangAnnotation: "" unset, else "true" or "false".
func gangSwitch(obj map[string]any) (string, error) {
	v, set := metaMap(obj, "annotations")[GangAnnotation]
	if !set {
		return "", nil
	}
	if v != "true" && v != "false" {
		return "", fmt.Errorf("annotation %s %q: want \"true\" or \"false\"", GangAnnotation, v)
	}
	return v, nil
}

func kindOf(obj map[string]any) string {
	k, _ := obj["kind"].(string)
	return k
}

// id names obj in reasons: "JobSet default/train".
func id(obj map[string]any) string {
	return fmt.Sprintf("%s %s/%s", kindOf(obj), metaString(obj, "namespace"), metaString(obj, "name"))
}

func refuse(g Gang, obj map[string]any, format string, args ...any) Gang {
	g.MinMember = 0
	g.Invalid = fmt.Sprintf("%s: %s (%v)", id(obj), fmt.Sprintf(format, args...), ErrInvalid)
	return g
}

func waiting(ns string, ref Ref) Gang {
	return Gang{Namespace: ns, Name: strings.ToLower(ref.Kind) + ":" + ref.Name, Kind: ref.Kind,
		Invalid: fmt.Sprintf("waiting for its owner %s %s/%s to reach the scheduler (just created, or deleted)", ref.Kind, ns, ref.Name)}
}
