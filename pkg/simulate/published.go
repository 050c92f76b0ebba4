package simulate

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/gpud/gpud/pkg/allocator"
)

// PublishedKey indexes a published table row.
type PublishedKey struct {
	Workload   string
	Policy     string
	ArrivedPct int
}

// ReadPublished reads a table in [Header]'s format, such as the FGD
// authors' fgd-published-unallocated.csv, keyed by workload, policy label and
// arrived percentage.
func ReadPublished(path string) (map[PublishedKey]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	defer f.Close()
	cr := csv.NewReader(f)
	cr.FieldsPerRecord = len(Header)
	out := map[PublishedKey]Row{}
	for line := 1; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("simulate: %s: %w", path, err)
		}
		if line == 1 {
			continue
		}
		var r Row
		var errs [6]error
		r.Workload, r.Policy = rec[0], rec[1]
		r.ArrivedPct, errs[0] = strconv.Atoi(rec[2])
		r.NSeeds, errs[1] = strconv.Atoi(rec[3])
		r.UnallocMean, errs[2] = strconv.ParseFloat(rec[4], 64)
		r.UnallocMedian, errs[3] = strconv.ParseFloat(rec[5], 64)
		r.UnallocSD, errs[4] = strconv.ParseFloat(rec[6], 64)
		r.FragOfTotalPct, errs[5] = strconv.ParseFloat(rec[7], 64)
		for _, e := range errs {
			if e != nil {
				return nil, fmt.Errorf("simulate: %s:%d: %w", path, line, e)
			}
		}
		out[PublishedKey{r.Workload, r.Policy, r.ArrivedPct}] = r
	}
}

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
