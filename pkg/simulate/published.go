package simulate

import (
	"fmt"
	"io"
	"os"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/trace"
)

// PublishedKey indexes a published table row.
type PublishedKey struct {
	Workload   string
	Policy     string
	ArrivedPct int
}

// ReadPublished reads a table in [Header]'s format, such as the FGD
// authors' fgd-published-unallocated.csv, keyed by workload, policy label and
// arrived percentage. It is read as pkg/trace reads traces: bounded, with
// errors at FILE:LINE: column.
func ReadPublished(path string) (map[PublishedKey]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	defer f.Close()
	out := map[PublishedKey]Row{}
	err = trace.ReadRows(f, path, Header, func(row *trace.Row) error {
		r := Row{Workload: row.Str("workload"), Policy: row.Str("policy")}
		r.ArrivedPct = int(row.IntIn("arrived_pct", 0, 1000))
		r.NSeeds = int(row.IntIn("n_seeds", 0, maxSeeds))
		r.UnallocMean = row.Float("unalloc_gpu_pct_mean")
		r.UnallocMedian = row.Float("unalloc_gpu_pct_median")
		r.UnallocSD = row.Float("unalloc_gpu_pct_sd")
		r.FragOfTotalPct = row.Float("frag_gpu_pct_of_total_mean")
		out[PublishedKey{r.Workload, r.Policy, r.ArrivedPct}] = r
		return row.Err
	})
	if err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	return out, nil
}

// maxSeeds bounds a published row's seed count.
const maxSeeds = 10000

// WriteComparison prints ours next to the published unallocated-GPU mean,
// one line per row; rows without a published value show "-". The last
// column is the row minus our FGD at the same workload and arrived point,
// which is how gpud is judged.
func WriteComparison(w io.Writer, rows []Row, pub map[PublishedKey]Row) {
	fgd := map[PublishedKey]float64{}
	for _, r := range rows {
		if r.Policy == allocator.PolicyLabel(allocator.PolicyFGD) {
			fgd[PublishedKey{r.Workload, "", r.ArrivedPct}] = r.UnallocMean
		}
	}
	fmt.Fprintf(w, "%-28s %-17s %4s %8s %8s %7s %7s\n", "workload", "policy", "arr%", "ours", "publ", "diff", "vsFGD")
	for _, r := range rows {
		vs := "-"
		if f, ok := fgd[PublishedKey{r.Workload, "", r.ArrivedPct}]; ok {
			vs = fmt.Sprintf("%+7.3f", r.UnallocMean-f)
		}
		p, ok := pub[PublishedKey{r.Workload, r.Policy, r.ArrivedPct}]
		if !ok {
			fmt.Fprintf(w, "%-28s %-17s %4d %8.3f %8s %7s %7s\n", r.Workload, r.Policy, r.ArrivedPct, r.UnallocMean, "-", "-", vs)
			continue
		}
		fmt.Fprintf(w, "%-28s %-17s %4d %8.3f %8.3f %+7.3f %7s\n", r.Workload, r.Policy, r.ArrivedPct, r.UnallocMean, p.UnallocMean, r.UnallocMean-p.UnallocMean, vs)
	}
}
