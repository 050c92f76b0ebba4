package simulate

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
)

// plotColors are distinguishable line colours, one per policy.
var plotColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// WriteSVG plots unallocated GPU % (y) against arrived workload % (x), one
// line per policy, as a self-contained SVG.
func WriteSVG(w io.Writer, title string, rows []Row) error {
	const (
		width, height       = 720, 440
		left, right         = 70, 170
		top, bottom         = 40, 50
		plotW, plotH        = width - left - right, height - top - bottom
		xTicks, yTickTarget = 5, 6
	)
	var policies []string
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	for _, r := range rows {
		if !slices.Contains(policies, r.Policy) {
			policies = append(policies, r.Policy)
		}
		xmin = math.Min(xmin, float64(r.ArrivedPct))
		xmax = math.Max(xmax, float64(r.ArrivedPct))
		ymax = math.Max(ymax, r.UnallocMean)
	}
	if len(rows) == 0 {
		xmin, xmax, ymax = 0, 1, 1
	}
	if xmax == xmin {
		xmax = xmin + 1
	}
	step := niceStep(ymax / yTickTarget)
	ymax = math.Ceil(ymax/step) * step
	x := func(v float64) float64 { return left + (v-xmin)/(xmax-xmin)*plotW }
	y := func(v float64) float64 { return top + plotH - v/ymax*plotH }

	var err error
	p := func(format string, a ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, a...)
		}
	}
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%d" y="22" font-size="15">%s</text>`+"\n", left, html.EscapeString(title))
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, top+plotH, left+plotW, top+plotH)
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, top, left, top+plotH)
	for v := 0.0; v <= ymax+1e-9; v += step {
		p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n",
			left, y(v), left+plotW, y(v), left-6, y(v)+4, math.Round(v*100)/100)
	}
	for i := 0; i < xTicks; i++ {
		v := xmin + (xmax-xmin)*float64(i)/float64(xTicks-1)
		p(`<text x="%.1f" y="%d" text-anchor="middle">%g</text>`+"\n", x(v), top+plotH+18, math.Round(v))
	}
	p(`<text x="%d" y="%d" text-anchor="middle">arrived workload (%% of GPU capacity)</text>`+"\n", left+plotW/2, height-10)
	p(`<text transform="translate(18,%d) rotate(-90)" text-anchor="middle">unallocated GPU (%%)</text>`+"\n", top+plotH/2)
	for i, pol := range policies {
		color := plotColors[i%len(plotColors)]
		p(`<polyline fill="none" stroke="%s" stroke-width="2" points="`, color)
		for _, r := range rows {
			if r.Policy == pol {
				p("%.1f,%.1f ", x(float64(r.ArrivedPct)), y(r.UnallocMean))
			}
		}
		p("\"/>\n")
		ly := top + 10 + 18*i
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`+"\n",
			left+plotW+12, ly, left+plotW+32, ly, color, left+plotW+38, ly+4, html.EscapeString(pol))
	}
	p("</svg>\n")
	if err != nil {
		return fmt.Errorf("simulate: svg: %w", err)
	}
	return nil
}

// niceStep rounds a raw tick step up to 1, 2 or 5 × 10^k.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	exp := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*exp {
			return m * exp
		}
	}
	return 10 * exp
}
