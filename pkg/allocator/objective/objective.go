package objective

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// ErrInvalid marks a sweep or model table that cannot be used.
var ErrInvalid = errors.New("invalid objective")

// Bounds on what Parse* accept.
const (
	// MaxSettings bounds the settings of one sweep.
	MaxSettings = 32
	// MaxInput bounds a sweep or model table, bytes.
	MaxInput = 64 << 10
	// MaxModels bounds the rows of a model table.
	MaxModels = 256
	// MaxWatts bounds a model's watts.
	MaxWatts = 100000
	// MaxPrice bounds a model's price per GPU-hour.
	MaxPrice = 1e6
)

// Terms are the weight names a setting may use, in print order.
var Terms = []string{"util", "wait", "fair", "energy", "cost"}

// Default is the setting that is today's policy exactly (no objective).
const Default = "default"

// Setting is one column of a sweep: its label and the objective, nil for
// [Default].
type Setting struct {
	Label     string
	Objective *jobs.Objective
}

// ParseSweep reads settings separated by ';' or newlines; '#' starts a
// comment to the end of the line; blank settings are skipped. A setting is
// [Default] or comma-separated term=weight pairs (terms in [Terms], each
// at most once, weights in [0, jobs.MaxWeight], at least one positive);
// terms left out weigh 0. Models are not set: see [Apply].
func ParseSweep(s string) ([]Setting, error) {
	if len(s) > MaxInput {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrInvalid, len(s), MaxInput)
	}
	var out []Setting
	for ln, line := range strings.Split(s, "\n") {
		if k := strings.IndexByte(line, '#'); k >= 0 {
			line = line[:k]
		}
		for _, part := range strings.Split(line, ";") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			st, err := parseSetting(part)
			if err != nil {
				return nil, fmt.Errorf("line %d, setting %q: %w", ln+1, part, err)
			}
			if len(out) == MaxSettings {
				return nil, fmt.Errorf("%w: more than %d settings", ErrInvalid, MaxSettings)
			}
			out = append(out, st)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no setting: give e.g. %q", ErrInvalid, "util=1,fair=1;energy=1")
	}
	return out, nil
}

func parseSetting(s string) (Setting, error) {
	if s == Default {
		return Setting{Label: Default}, nil
	}
	o := &jobs.Objective{}
	seen := map[string]bool{}
	var labels []string
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return Setting{}, fmt.Errorf("%w: %q: want term=weight with term one of %s", ErrInvalid, kv, strings.Join(Terms, ", "))
		}
		if !slices.Contains(Terms, k) {
			return Setting{}, fmt.Errorf("%w: unknown term %q: want one of %s", ErrInvalid, k, strings.Join(Terms, ", "))
		}
		if seen[k] {
			return Setting{}, fmt.Errorf("%w: term %q given twice", ErrInvalid, k)
		}
		seen[k] = true
		w, err := strconv.ParseFloat(v, 64)
		if err != nil || !(w >= 0 && w <= jobs.MaxWeight) {
			return Setting{}, fmt.Errorf("%w: %s=%s: want a number in [0, %g]", ErrInvalid, k, v, jobs.MaxWeight)
		}
		*weight(o, k) = w
	}
	if o.Util+o.Wait+o.Fair+o.Energy+o.Cost == 0 {
		return Setting{}, fmt.Errorf("%w: every weight is 0: give at least one term a positive weight", ErrInvalid)
	}
	for _, t := range Terms { // canonical label: terms in order, zeros left out
		if w := *weight(o, t); w > 0 {
			labels = append(labels, t+"="+strconv.FormatFloat(w, 'g', -1, 64))
		}
	}
	return Setting{Label: strings.Join(labels, ","), Objective: o}, nil
}

func weight(o *jobs.Objective, term string) *float64 {
	switch term {
	case "util":
		return &o.Util
	case "wait":
		return &o.Wait
	case "fair":
		return &o.Fair
	case "energy":
		return &o.Energy
	}
	return &o.Cost
}

// Generic is the power of a GPU model the table does not know: a typical
// 300 W data-centre GPU.
var Generic = jobs.ModelPower{BusyWatts: 300, IdleWatts: 50}

// DefaultModels is the power of the GPU models of public traces (openb's
// and common data-centre GPUs): busy is the board power limit, idle the
// draw of an idle GPU with the driver loaded; off is 0 (a node with
// nothing on it is suspended by power management); prices are 0 (the
// admin gives them). openb's G1–G3 are undisclosed and get a 250 W class.
func DefaultModels() map[string]jobs.ModelPower {
	return map[string]jobs.ModelPower{
		"V100M16": {BusyWatts: 300, IdleWatts: 50},
		"V100M32": {BusyWatts: 300, IdleWatts: 50},
		"P100":    {BusyWatts: 250, IdleWatts: 30},
		"T4":      {BusyWatts: 70, IdleWatts: 10},
		"A10":     {BusyWatts: 150, IdleWatts: 20},
		"G1":      {BusyWatts: 250, IdleWatts: 35},
		"G2":      {BusyWatts: 250, IdleWatts: 35},
		"G3":      {BusyWatts: 250, IdleWatts: 35},
		"A100":    {BusyWatts: 400, IdleWatts: 55},
		"H100":    {BusyWatts: 700, IdleWatts: 70},
		"H200":    {BusyWatts: 700, IdleWatts: 70},
		"L4":      {BusyWatts: 72, IdleWatts: 16},
	}
}

// Lookup is m's entry for model, or [Generic].
func Lookup(m map[string]jobs.ModelPower, model string) jobs.ModelPower {
	if p, ok := m[model]; ok {
		return p
	}
	return Generic
}

// ParseModels reads a model table in CSV with a header: `model` is
// required; `busy_w`, `idle_w`, `off_w` and `price_per_gpu_hour` are
// optional columns, and an empty cell keeps the value of base (or
// [Generic]) for that model. It returns base with the rows applied. name
// prefixes errors (FILE:LINE: column NAME: why).
func ParseModels(data []byte, name string, base map[string]jobs.ModelPower) (map[string]jobs.ModelPower, error) {
	if len(data) > MaxInput {
		return nil, fmt.Errorf("%s: %w: %d bytes, at most %d", name, ErrInvalid, len(data), MaxInput)
	}
	out := make(map[string]jobs.ModelPower, len(base))
	for k, v := range base {
		out[k] = v
	}
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = -1
	hdr, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s:1: %w: header: %w", name, ErrInvalid, err)
	}
	cols := map[string]int{}
	known := []string{"model", "busy_w", "idle_w", "off_w", "price_per_gpu_hour"}
	for i, h := range hdr {
		h = strings.TrimSpace(h)
		if !slices.Contains(known, h) {
			return nil, fmt.Errorf("%s:1: %w: column %q: want %s", name, ErrInvalid, h, strings.Join(known, ", "))
		}
		if _, dup := cols[h]; dup {
			return nil, fmt.Errorf("%s:1: %w: column %q twice", name, ErrInvalid, h)
		}
		cols[h] = i
	}
	if _, ok := cols["model"]; !ok {
		return nil, fmt.Errorf("%s:1: %w: no model column", name, ErrInvalid)
	}
	seen := map[string]bool{}
	for rows := 0; ; rows++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %w", name, ErrInvalid, err)
		}
		line, _ := r.FieldPos(0)
		if rows == MaxModels {
			return nil, fmt.Errorf("%s:%d: %w: more than %d models", name, line, ErrInvalid, MaxModels)
		}
		cell := func(c string) string {
			if i, ok := cols[c]; ok && i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		model := cell("model")
		if model == "" || seen[model] {
			return nil, fmt.Errorf("%s:%d: %w: column model: empty or listed twice", name, line, ErrInvalid)
		}
		seen[model] = true
		p := Lookup(out, model)
		for _, f := range []struct {
			col string
			dst *float64
			hi  float64
		}{{"busy_w", &p.BusyWatts, MaxWatts}, {"idle_w", &p.IdleWatts, MaxWatts}, {"off_w", &p.OffWatts, MaxWatts},
			{"price_per_gpu_hour", &p.PricePerHour, MaxPrice}} {
			v := cell(f.col)
			if v == "" {
				continue
			}
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || !(x >= 0 && x <= f.hi) {
				return nil, fmt.Errorf("%s:%d: %w: column %s: %q: want a number in [0, %g]", name, line, ErrInvalid, f.col, v, f.hi)
			}
			*f.dst = x
		}
		if p.IdleWatts > p.BusyWatts || p.OffWatts > p.IdleWatts {
			return nil, fmt.Errorf("%s:%d: %w: model %s: want off_w <= idle_w <= busy_w, got %g, %g, %g", name, line, ErrInvalid, model, p.OffWatts, p.IdleWatts, p.BusyWatts)
		}
		out[model] = p
	}
	return out, nil
}

// Apply returns settings with models set on every objective.
func Apply(settings []Setting, models map[string]jobs.ModelPower) []Setting {
	out := slices.Clone(settings)
	for i := range out {
		if out[i].Objective != nil {
			o := *out[i].Objective
			o.Models = models
			out[i].Objective = &o
		}
	}
	return out
}

// Jain is Jain's fairness index of xs: (Σx)² / (n·Σx²), 1 when all are
// equal, 1/n when one has everything; 1 for no values or all zeros.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if len(xs) == 0 || s2 == 0 || math.IsNaN(s2) || math.IsInf(s2, 0) {
		return 1
	}
	return s * s / (float64(len(xs)) * s2)
}

// ParseSetting reads one setting, as [ParseSweep] reads each: [Default]
// (nil: today's policy) or comma-separated term=weight pairs. It is what
// gpud scheduler's --objectives takes.
func ParseSetting(s string) (*jobs.Objective, error) {
	if strings.ContainsAny(s, ";\n") {
		return nil, fmt.Errorf("%w: %q: one setting only (no ';' or newline): give e.g. %q", ErrInvalid, s, "util=1,fair=1")
	}
	st, err := ParseSweep(s)
	if err != nil {
		return nil, err
	}
	return st[0].Objective, nil
}

// Match is m's entry for a GPU's product name (the ResourceSlice attribute
// productName): the exact name; else the longest model of m that appears
// in it as a word, ignoring case ("H100" in "NVIDIA H100 80GB HBM3", not
// "L4" in "NVIDIA L40S"; ties: the first by name); else [Generic].
func Match(m map[string]jobs.ModelPower, product string) jobs.ModelPower {
	if p, ok := m[product]; ok {
		return p
	}
	best := ""
	lp := strings.ToLower(product)
	for model := range m {
		if model == "" || (len(model) < len(best)) || (len(model) == len(best) && model > best) {
			continue
		}
		if hasWord(lp, strings.ToLower(model)) {
			best = model
		}
	}
	if best == "" {
		return Generic
	}
	return m[best]
}

// hasWord reports whether w occurs in s between non-alphanumeric
// characters or the ends.
func hasWord(s, w string) bool {
	alnum := func(b byte) bool { return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' }
	for i := 0; i+len(w) <= len(s); i++ {
		k := strings.Index(s[i:], w)
		if k < 0 {
			return false
		}
		i += k
		end := i + len(w)
		if (i == 0 || !alnum(s[i-1])) && (end == len(s) || !alnum(s[end])) {
			return true
		}
	}
	return false
}
