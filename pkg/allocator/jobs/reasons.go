package jobs

import "fmt"

// describe spells one pod's GPU demand, e.g. "8 GPU", "300 milli-GPU",
// "MIG 3g.40gb".
func (d *demand) describe() string {
	switch d.kind {
	case kindWhole:
		return fmt.Sprintf("%d GPU", d.num)
	case kindFrac:
		if d.gmem > 0 {
			return fmt.Sprintf("%d milli-GPU + %d MiB GPU memory", d.milli, d.gmem)
		}
		return fmt.Sprintf("%d milli-GPU", d.milli)
	case kindMIG:
		return "MIG " + d.mig.Name
	}
	return fmt.Sprintf("%d milli-CPU", d.cpu)
}

// checkNever decides at submit time whether j fits on the empty cluster.
func (s *Scheduler) checkNever(j *jobState) {
	d := j.d
	pods, miss := s.empty.placeGang(&d, j.n, j.job.Topology, j.job.Required, nil)
	if pods != nil {
		s.empty.unbindAll(pods, &d)
		j.fits = true
		return
	}
	j.never = reasonf(CodeNeverFits, "%d pod(s) of %s (%d milli-CPU, %d MiB) within one %s: even the empty cluster's best %s %q has room for %d",
		j.n, d.describe(), d.cpu, d.mem, miss.level, miss.level, miss.name, max(miss.best, 0))
}

func (s *Scheduler) never(j *jobState) (Reason, bool) { return j.never, j.fits }

// capacityReason explains why j does not fit now: the domain level, the best
// domain's room, and the cluster-wide room, so the missing amount shows.
func (s *Scheduler) capacityReason(j *jobState, d *demand, miss gangMiss, mask []bool) Reason {
	total := 0
	for i := range s.c.info {
		if mask != nil && mask[i] {
			continue
		}
		if total += s.c.podsFit(i, d, j.n-total); total >= j.n {
			break
		}
	}
	reserved := ""
	if mask != nil {
		reserved = " (reserved nodes excluded)"
	}
	if j.n > 1 && miss.level != LevelNone && total >= j.n {
		return reasonf(CodeTopology, "gang of %d x %s needs one %s: best %s %q has room for %d, %d pod(s) short%s",
			j.n, d.describe(), miss.level, miss.level, miss.name, miss.best, j.n-miss.best, reserved)
	}
	return reasonf(CodeCapacity, "%d pod(s) of %s: free capacity has room for %d, %d pod(s) short%s",
		j.n, d.describe(), total, j.n-total, reserved)
}
