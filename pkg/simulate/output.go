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
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	return writeCSV(w, Header, len(rows), func(i int) []string {
		r := rows[i]
		return []string{r.Workload, r.Policy, strconv.Itoa(r.ArrivedPct), strconv.Itoa(r.NSeeds),
			f(r.UnallocMean), f(r.UnallocMedian), f(r.UnallocSD), f(r.FragOfTotalPct)}
	})
}

// WriteReplayCSV writes replay results under [ReplayHeader].
func WriteReplayCSV(w io.Writer, workload string, res []ReplayResult) error {
	return writeCSV(w, ReplayHeader, len(res), func(i int) []string {
		r := res[i]
		return []string{workload, allocator.PolicyLabel(r.Policy), strconv.Itoa(r.Pods), strconv.Itoa(r.Placed), strconv.Itoa(r.Unplaced),
			strconv.Itoa(r.Delayed), strconv.FormatFloat(r.AllocGPUPctTimeAvg, 'f', 3, 64),
			strconv.FormatFloat(r.MeanQueueDelaySec, 'f', 1, 64), strconv.FormatInt(r.MaxQueueDelaySec, 10)}
	})
}

// writeCSV writes header and then record(i) for i in [0, n).
func writeCSV(w io.Writer, header []string, n int, record func(i int) []string) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return fmt.Errorf("simulate: csv: %w", err)
	}
	for i := range n {
		if err := cw.Write(record(i)); err != nil {
			return fmt.Errorf("simulate: csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("simulate: csv: %w", err)
	}
	return nil
}
