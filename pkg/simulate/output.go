package simulate

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"

	"github.com/gpud/gpud/pkg/allocator"
)

// Header is the published table's header.
var Header = []string{"workload", "policy", "arrived_pct", "n_seeds", "unalloc_gpu_pct_mean", "unalloc_gpu_pct_median", "unalloc_gpu_pct_sd", "frag_gpu_pct_of_total_mean"}

// WriteCSV writes rows under [Header].
func WriteCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(Header); err != nil {
		return fmt.Errorf("simulate: csv: %w", err)
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	for _, r := range rows {
		rec := []string{r.Workload, r.Policy, strconv.Itoa(r.ArrivedPct), strconv.Itoa(r.NSeeds),
			f(r.UnallocMean), f(r.UnallocMedian), f(r.UnallocSD), f(r.FragOfTotalPct)}
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("simulate: csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("simulate: csv: %w", err)
	}
	return nil
}

// WriteReplayCSV writes replay results under [ReplayHeader].
func WriteReplayCSV(w io.Writer, workload string, res []ReplayResult) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(ReplayHeader); err != nil {
		return fmt.Errorf("simulate: csv: %w", err)
	}
	for _, r := range res {
		rec := []string{workload, allocator.PolicyLabel(r.Policy), strconv.Itoa(r.Pods), strconv.Itoa(r.Placed), strconv.Itoa(r.Unplaced),
			strconv.Itoa(r.Delayed), strconv.FormatFloat(r.AllocGPUPctTimeAvg, 'f', 3, 64),
			strconv.FormatFloat(r.MeanQueueDelaySec, 'f', 1, 64), strconv.FormatInt(r.MaxQueueDelaySec, 10)}
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("simulate: csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("simulate: csv: %w", err)
	}
	return nil
}
