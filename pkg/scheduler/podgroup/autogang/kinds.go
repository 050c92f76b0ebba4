package autogang

import (
	"slices"
	"strings"
)

// maxListLen bounds the lists Resolve walks (replicated jobs, worker
// groups, replica specs).
const maxListLen = 1000

// jobGang is the rule of a batch/v1 Job not in a JobSet.
func jobGang(obj map[string]any) (Gang, bool) {
	g := Gang{Name: "job:" + metaString(obj, "name"), Kind: KindJob}
	sw, err := gangSwitch(obj)
	if err != nil {
		return refuse(g, obj, "%v", err), true
	}
	mode, err := str(obj, "spec", "completionMode")
	if err != nil {
		return refuse(g, obj, "%v", err), true
	}
	if sw == "false" || (sw == "" && mode != "Indexed") {
		return Gang{}, false
	}
	n, err := jobPods(obj, "spec")
	if err != nil {
		return refuse(g, obj, "%v", err), true
	}
	if c, set := field(obj, "spec", "completions"); set && c != nil {
		done, err := count(obj, 0, "status", "succeeded")
		if err != nil {
			return refuse(g, obj, "%v", err), true
		}
		comp, _ := count(obj, 0, "spec", "completions") // read by jobPods
		n = min(n, max(comp-done, 0))
	}
	g.MinMember = int32(n)
	return g, true
}

// jobPods is how many pods a Job spec (at path in obj) runs at once:
// min(parallelism (default 1), completions when set).
func jobPods(obj map[string]any, path ...string) (int64, error) {
	p, err := count(obj, 1, append(slices.Clone(path), "parallelism")...)
	if err != nil {
		return 0, err
	}
	c, err := count(obj, -1, append(slices.Clone(path), "completions")...)
	if err != nil {
		return 0, err
	}
	if c >= 0 {
		p = min(p, c)
	}
	return p, nil
}

// jobSetGang is the rule of a JobSet; below are the owners between it
// and the pod (its Job).
func jobSetGang(pod Pod, obj map[string]any, below []map[string]any) (Gang, bool) {
	name := metaString(obj, "name")
	g := Gang{Name: "jobset:" + name, Kind: KindJobSet}
	if sw, err := gangSwitch(obj); err != nil {
		return refuse(g, obj, "%v", err), true
	} else if sw == "false" {
		return Gang{}, false
	}
	order, err := str(obj, "spec", "startupPolicy", "startupPolicyOrder")
	if err != nil {
		return refuse(g, obj, "%v", err), true
	}
	v, _ := field(obj, "spec", "replicatedJobs")
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return refuse(g, obj, "spec.replicatedJobs is missing or empty"), true
	}
	if len(list) > maxListLen {
		return refuse(g, obj, "spec.replicatedJobs has %d entries, more than %d", len(list), maxListLen), true
	}
	mine := pod.Labels[ReplicatedJobLabel]
	if mine == "" && len(below) > 0 {
		mine = metaMap(below[0], "labels")[ReplicatedJobLabel]
	}
	var total, part int64
	found := false
	for i, x := range list {
		rj, ok := x.(map[string]any)
		if !ok {
			return refuse(g, obj, "spec.replicatedJobs[%d] is %T, want an object", i, x), true
		}
		rjName, err := str(rj, "name")
		if err != nil {
			return refuse(g, obj, "spec.replicatedJobs[%d].%v", i, err), true
		}
		replicas, err := count(rj, 1, "replicas")
		if err != nil {
			return refuse(g, obj, "spec.replicatedJobs[%d].%v", i, err), true
		}
		per, err := jobPods(rj, "template", "spec")
		if err != nil {
			return refuse(g, obj, "spec.replicatedJobs[%d].%v", i, err), true
		}
		n, ok := mul(replicas, per)
		if ok {
			total, ok = add(total, n)
		}
		if !ok {
			return refuse(g, obj, "spec.replicatedJobs run more than %d pods at once", MaxMinMember), true
		}
		if rjName == mine {
			part, found = n, true
		}
	}
	if order != "InOrder" {
		g.MinMember = int32(total)
		return g, true
	}
	// InOrder: a replicated job's Jobs are created once the earlier ones
	// run, so each replicated job is its own gang.
	if !found {
		return refuse(g, obj, "startupPolicyOrder InOrder and the pod's %s label %q names no replicated job", ReplicatedJobLabel, mine), true
	}
	g.Name += ":" + mine
	g.MinMember = int32(part)
	return g, true
}

// lwsGang is the rule of a LeaderWorkerSet's pod; obj is the
// LeaderWorkerSet (nil: not seen yet).
func lwsGang(pod Pod, name string, obj map[string]any) (Gang, bool) {
	idx := pod.Labels[LWSGroupIndexLabel]
	g := Gang{Namespace: pod.Namespace, Name: "lws:" + name + ":" + idx, Kind: KindLWS}
	if obj == nil {
		w := waiting(pod.Namespace, Ref{Kind: KindLWS, Name: name})
		w.Name = g.Name
		return w, true
	}
	if idx == "" || len(idx) > maxLabelValue || strings.ContainsAny(idx, "/:") {
		return finish(refuse(g, obj, "pod label %s %q: want the group's index", LWSGroupIndexLabel, idx), true, obj, pod.Namespace)
	}
	if sw, err := gangSwitch(obj); err != nil {
		return finish(refuse(g, obj, "%v", err), true, obj, pod.Namespace)
	} else if sw == "false" {
		return Gang{}, false
	}
	size, err := count(obj, 1, "spec", "leaderWorkerTemplate", "size")
	if err != nil {
		return finish(refuse(g, obj, "%v", err), true, obj, pod.Namespace)
	}
	if s, set := pod.Annotations[LWSSizeAnnotation]; set {
		if size, err = countString(s); err != nil {
			return finish(refuse(g, obj, "pod annotation %s: %v", LWSSizeAnnotation, err), true, obj, pod.Namespace)
		}
	}
	policy, err := str(obj, "spec", "startupPolicy")
	if err != nil {
		return finish(refuse(g, obj, "%v", err), true, obj, pod.Namespace)
	}
	if policy == "LeaderReady" {
		// The workers are created once the leader is ready: the leader
		// goes alone, the workers together.
		if pod.Labels[LWSWorkerIndexLabel] == lwsLeaderWorkerIndex {
			return Gang{}, false
		}
		size--
	}
	g.MinMember = int32(size)
	return finish(g, true, obj, pod.Namespace)
}

// kubeflowGang is the rule of a Kubeflow training job of kind.
func kubeflowGang(obj map[string]any, kind string) (Gang, bool) {
	g := Gang{Name: strings.ToLower(kind) + ":" + metaString(obj, "name"), Kind: kind}
	if sw, err := gangSwitch(obj); err != nil {
		return refuse(g, obj, "%v", err), true
	} else if sw == "false" {
		return Gang{}, false
	}
	specs := KubeflowReplicaSpecs[kind]
	v, _ := field(obj, "spec", specs)
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return refuse(g, obj, "spec.%s is missing or empty", specs), true
	}
	if len(m) > maxListLen {
		return refuse(g, obj, "spec.%s has %d entries, more than %d", specs, len(m), maxListLen), true
	}
	var total int64
	for _, role := range sortedKeys(m) {
		rs, ok := m[role].(map[string]any)
		if !ok {
			return refuse(g, obj, "spec.%s.%s is %T, want an object", specs, role, m[role]), true
		}
		n, err := count(rs, 1, "replicas")
		if err != nil {
			return refuse(g, obj, "spec.%s.%s.%v", specs, role, err), true
		}
		if total, ok = add(total, n); !ok {
			return refuse(g, obj, "spec.%s runs more than %d pods", specs, MaxMinMember), true
		}
	}
	g.MinMember = int32(total)
	if ma, set := field(obj, "spec", "runPolicy", "schedulingPolicy", "minAvailable"); set && ma != nil {
		n, err := count(obj, 0, "spec", "runPolicy", "schedulingPolicy", "minAvailable")
		if err != nil {
			return refuse(g, obj, "%v", err), true
		}
		if n > total {
			return refuse(g, obj, "spec.runPolicy.schedulingPolicy.minAvailable %d is above the job's %d pods", n, total), true
		}
		g.MinMember = int32(n)
	}
	return g, true
}

// rayGang is the rule of a RayCluster (a RayJob's or a RayService's too).
func rayGang(obj map[string]any) (Gang, bool) {
	g := Gang{Name: "raycluster:" + metaString(obj, "name"), Kind: KindRayCluster}
	if sw, err := gangSwitch(obj); err != nil {
		return refuse(g, obj, "%v", err), true
	} else if sw == "false" {
		return Gang{}, false
	}
	total := int64(1) // the head
	v, _ := field(obj, "spec", "workerGroupSpecs")
	list, _ := v.([]any)
	if len(list) > maxListLen {
		return refuse(g, obj, "spec.workerGroupSpecs has %d entries, more than %d", len(list), maxListLen), true
	}
	for i, x := range list {
		wg, ok := x.(map[string]any)
		if !ok {
			return refuse(g, obj, "spec.workerGroupSpecs[%d] is %T, want an object", i, x), true
		}
		if s, _ := field(wg, "suspended"); s == true {
			continue
		}
		replicas, err := count(wg, 0, "replicas")
		if err != nil {
			return refuse(g, obj, "spec.workerGroupSpecs[%d].%v", i, err), true
		}
		minR, err := count(wg, 0, "minReplicas")
		if err != nil {
			return refuse(g, obj, "spec.workerGroupSpecs[%d].%v", i, err), true
		}
		hosts, err := count(wg, 1, "numOfHosts")
		if err != nil {
			return refuse(g, obj, "spec.workerGroupSpecs[%d].%v", i, err), true
		}
		if minR > 0 {
			replicas = minR
		}
		n, ok := mul(replicas, hosts)
		if ok {
			total, ok = add(total, n)
		}
		if !ok {
			return refuse(g, obj, "spec.workerGroupSpecs run more than %d pods", MaxMinMember), true
		}
	}
	g.MinMember = int32(total)
	return g, true
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
