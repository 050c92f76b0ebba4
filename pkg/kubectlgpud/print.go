package kubectlgpud

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpud/gpud/pkg/scheduler/queues"
)

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0) }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// printNotes writes what could not be read, after a table.
func printNotes(w io.Writer, notes []string) {
	for _, n := range notes {
		fmt.Fprintln(w, "note:", n)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// cell keeps a table cell on one line: tabs and newlines from API
// strings become spaces.
func cell(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' || r < 0x20 {
			return ' '
		}
		return r
	}, s)
}

func printNodes(w io.Writer, output string, nodes []NodeInfo, notes []string) error {
	if output == OutputJSON {
		return writeJSON(w, struct {
			Nodes []NodeInfo `json:"nodes"`
			Notes []string   `json:"notes,omitempty"`
		}{nodes, notes})
	}
	t := newTable(w)
	fmt.Fprintln(t, "NODE\tSOURCE\tMODEL\tGPUS\tFREE\tMIG (USED/PRESENT)\tSHARED (USED/TOTAL)\tHEALTH")
	for _, n := range nodes {
		var mig []string
		for _, m := range n.MIG {
			mig = append(mig, fmt.Sprintf("%s %d/%d", m.Profile, m.Used, m.Present))
		}
		var shared []string
		for _, s := range n.Shared {
			if s.GPU < 0 {
				shared = append(shared, fmt.Sprintf("%d/%d replicas", s.Shares, s.Replicas))
				continue
			}
			shared = append(shared, fmt.Sprintf("gpu %d %s/%s (%d)", s.GPU, bytesGi(s.UsedBytes), bytesGi(s.MemoryBytes), s.Shares))
		}
		health := "ok"
		if len(n.Unhealthy) > 0 {
			health = strings.Join(n.Unhealthy, "; ")
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", cell(n.Name), n.Source, cell(dash(n.Model)), n.GPUs, n.FreeGPUs,
			cell(dash(strings.Join(mig, ", "))), dash(strings.Join(shared, ", ")), cell(health))
	}
	if err := t.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	printNotes(w, notes)
	return nil
}

// describe is one device use for a table cell.
func describe(d DeviceUse) string {
	on := ""
	if d.GPU >= 0 {
		on = fmt.Sprintf(" gpu %d", d.GPU)
	}
	switch d.Kind {
	case KindMIG:
		s := "mig"
		if d.Profile != "" {
			s += " " + d.Profile
		}
		if d.MemoryBytes > 0 {
			s += " (" + bytesGi(d.MemoryBytes) + ")"
		}
		return s + on
	case KindFraction:
		if on == "" {
			return bytesGi(d.MemoryBytes) + " of a gpu"
		}
		return bytesGi(d.MemoryBytes) + " of" + on
	case KindResource:
		return fmt.Sprintf("%d %s", d.Count, d.Device)
	}
	if d.GPU >= 0 {
		return "gpu" + on[len(" gpu"):]
	}
	if d.Count > 0 && d.Device != "" && d.Device != "gpu.gpud.io" {
		return fmt.Sprintf("%d %s", d.Count, d.Device)
	}
	if d.Count > 0 {
		return fmt.Sprintf("%d %s", d.Count, plural(d.Count, "gpu", "gpus"))
	}
	return "gpu " + dash(d.Device)
}

// describeAll joins device uses, whole GPUs of one claim as "gpu 0,1,2".
func describeAll(ds []DeviceUse) string {
	var parts []string
	var gpus []string
	for _, d := range ds {
		if d.Kind == KindGPU && d.GPU >= 0 {
			gpus = append(gpus, itoa(d.GPU))
			continue
		}
		parts = append(parts, describe(d))
	}
	if len(gpus) > 0 {
		parts = append([]string{plural(len(gpus), "gpu ", "gpus ") + strings.Join(gpus, ",")}, parts...)
	}
	return strings.Join(parts, ", ")
}

func printPods(w io.Writer, output string, pods []PodInfo, notes []string) error {
	if output == OutputJSON {
		return writeJSON(w, struct {
			Pods  []PodInfo `json:"pods"`
			Notes []string  `json:"notes,omitempty"`
		}{pods, notes})
	}
	t := newTable(w)
	fmt.Fprintln(t, "NAMESPACE\tPOD\tNODE\tPHASE\tDEVICES\tQUEUE\tGROUP")
	for _, p := range pods {
		devs := describeAll(p.Devices)
		if len(p.Wants) > 0 {
			devs = joinNonEmpty(devs, "wants "+describeAll(p.Wants), "; ")
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, dash(p.Node), cell(p.Phase), cell(dash(devs)),
			cell(dash(p.Queue)), cell(dash(p.Group)))
	}
	if err := t.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	printNotes(w, notes)
	return nil
}

func printQueues(w io.Writer, output string, s *Snapshot, objs []QueueObject, use []QueueUse) error {
	if output == OutputJSON {
		return writeJSON(w, struct {
			QueueObjects []QueueObject `json:"queueObjects"`
			Queues       []QueueUse    `json:"queues"`
			// NamespaceQueues are the namespaces bound by their
			// gpud.io/queue label, with the queue each names.
			NamespaceQueues map[string]string `json:"namespaceQueues,omitempty"`
			Notes           []string          `json:"notes,omitempty"`
		}{objs, use, s.NamespaceQueues, s.Notes})
	}
	if s.QueuesRead {
		t := newTable(w)
		fmt.Fprintln(t, "QUEUE\tWEIGHT\tNAMESPACES\tGUARANTEED\tLIMIT\tUSED\tPENDING\tSTATUS")
		for _, q := range objs {
			fmt.Fprintf(t, "%s%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", strings.Repeat("  ", q.Depth), cell(q.Name), cell(q.Weight),
				cell(namespacesCell(q)), cell(resourceCells(q.Guaranteed, q.ModelGuaranteed)),
				cell(resourceCells(q.Limit, q.ModelLimit)), resourceCells(q.Usage, nil), q.PendingPods, queueState(q))
		}
		if err := t.Flush(); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
		if len(objs) == 0 {
			fmt.Fprintln(w, "No Queue objects.")
		}
		for _, q := range objs {
			if q.Message != "" {
				fmt.Fprintf(w, "%s: %s\n", cell(q.Name), cell(q.Message))
			}
		}
		for _, q := range objs {
			if q.Objectives != "" {
				fmt.Fprintf(w, "%s: objectives %s\n", cell(q.Name), cell(q.Objectives))
			}
		}
		if unknown := UnknownLabelQueues(s); len(unknown) > 0 {
			fmt.Fprintf(w, "Namespaces whose %s label names no Queue object (a --queues file queue, if gpud scheduler's file defines it): %s\n",
				queues.NamespaceLabel, cell(strings.Join(unknown, ", ")))
		}
		fmt.Fprintln(w, "Queue objects: spec and the status gpud scheduler writes (usage includes the children's; pending pods the leaves').")
		fmt.Fprintln(w)
	}
	t := newTable(w)
	fmt.Fprintln(t, "QUEUE\tRUNNING\tPENDING\tGPUS\tMIG\tFRACTIONS")
	for _, q := range use {
		name := q.Name
		if name == "" {
			name = "(no queue label)"
			if s.QueuesRead {
				name = "(no queue)"
			}
		}
		frac := "-"
		if q.FractionBytes > 0 {
			frac = bytesGi(q.FractionBytes)
		}
		fmt.Fprintf(t, "%s\t%d\t%d\t%d\t%d\t%s\n", cell(name), q.Running, q.Pending, q.GPUs, q.MIG, frac)
	}
	if err := t.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	switch {
	case s.QueuesRead && s.NamespacesRead:
		fmt.Fprintln(w, "Pods by queue: their namespace's queue (a Queue's spec.namespaces, or the namespace's gpud.io/queue label) or their own gpud.io/queue label.")
	case len(s.NamespaceQueues) > 0:
		fmt.Fprintln(w, "Pods by their namespace's gpud.io/queue label, else their own; guarantees and limits are in the Queue objects or gpud scheduler's --queues file.")
	case s.QueuesRead:
		fmt.Fprintln(w, "Pods by queue: their namespace's Queue (spec.namespaces) or their gpud.io/queue label; namespaces bound by their label count by the pods' label.")
	default:
		fmt.Fprintln(w, "Pods by their gpud.io/queue label; guarantees and limits are in the Queue objects or gpud scheduler's --queues file.")
	}
	printNotes(w, s.Notes)
	return nil
}

func printWhy(w io.Writer, output string, wi WhyInfo) error {
	if output == OutputJSON {
		return writeJSON(w, wi)
	}
	p := wi.Pod
	fmt.Fprintf(w, "Pod:        %s/%s\n", p.Namespace, p.Name)
	fmt.Fprintf(w, "Phase:      %s\n", cell(p.Phase))
	fmt.Fprintf(w, "Node:       %s\n", dash(p.Node))
	fmt.Fprintf(w, "Scheduler:  %s\n", cell(wi.Scheduler))
	if len(p.Devices) > 0 {
		fmt.Fprintf(w, "Holds:      %s\n", describeAll(p.Devices))
	}
	if len(p.Wants) > 0 {
		fmt.Fprintf(w, "Wants:      %s\n", describeAll(p.Wants))
	}
	if c := wi.Scheduled; c != nil {
		fmt.Fprintf(w, "Scheduled:  %s", c.Status)
		if c.Reason != "" {
			fmt.Fprintf(w, " (%s)", cell(c.Reason))
		}
		if c.Message != "" {
			fmt.Fprintf(w, ": %s", cell(c.Message))
		}
		fmt.Fprintln(w)
	}
	if q := wi.Queue; q != nil {
		holds := []string{fmt.Sprintf("%d %s", q.GPUs, plural(q.GPUs, "GPU", "GPUs"))}
		if q.MIG > 0 {
			holds = append(holds, fmt.Sprintf("%d MIG %s", q.MIG, plural(q.MIG, "slice", "slices")))
		}
		if q.FractionBytes > 0 {
			holds = append(holds, bytesGi(q.FractionBytes)+" of fractions")
		}
		fmt.Fprintf(w, "Queue:      %s: %d running, %d pending; holds %s\n", cell(q.Name), q.Running, q.Pending, strings.Join(holds, ", "))
	} else if p.Queue != "" {
		fmt.Fprintf(w, "Queue:      %s\n", cell(p.Queue))
	}
	if g := wi.Group; g != nil {
		fmt.Fprintf(w, "Group:      %s: %d of %d members bound\n", cell(g.Name), g.Bound, g.Members)
	}
	if len(wi.Room) > 0 || wi.Fits != "" || wi.Moves != "" {
		fmt.Fprintln(w, "Room:")
		for _, r := range wi.Room {
			fmt.Fprintf(w, "  %s\n", cell(r))
		}
		if wi.Fits != "" {
			fmt.Fprintf(w, "  %s\n", cell(wi.Fits))
		}
		if wi.Moves != "" {
			fmt.Fprintf(w, "  %s\n", cell(wi.Moves))
		}
	}
	if len(wi.Events) > 0 {
		fmt.Fprintln(w, "Events (newest first):")
		t := newTable(w)
		fmt.Fprintln(t, "  TIME\tTYPE\tREASON\tFROM\tCOUNT\tMESSAGE")
		for _, e := range wi.Events {
			fmt.Fprintf(t, "  %s\t%s\t%s\t%s\t%d\t%s\n", e.Time.Format(time.RFC3339), cell(e.Type), cell(e.Reason), cell(dash(e.From)), max(e.Count, 1), cell(e.Message))
		}
		if err := t.Flush(); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
	}
	printNotes(w, wi.Notes)
	return nil
}
