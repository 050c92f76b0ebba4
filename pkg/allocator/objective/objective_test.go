package objective

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

func TestParseSweep(t *testing.T) {
	got, err := ParseSweep("util=1;util=1, wait=2 # comment\ndefault\n\nenergy=0.5,fair=0")
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, s := range got {
		labels = append(labels, s.Label)
	}
	if want := "util=1|util=1,wait=2|default|energy=0.5"; strings.Join(labels, "|") != want {
		t.Fatalf("labels %q, want %q", strings.Join(labels, "|"), want)
	}
	if got[2].Objective != nil {
		t.Fatal("default must be no objective (today's policy)")
	}
	if o := got[1].Objective; o.Util != 1 || o.Wait != 2 || o.Fair != 0 {
		t.Fatalf("weights %+v", o)
	}
}

func TestParseSweepErrors(t *testing.T) {
	for in, want := range map[string]string{
		"":                                       "no setting",
		"speed=1":                                `unknown term "speed"`,
		"util=1,util=2":                          "given twice",
		"util=-1":                                "util=-1",
		"util=NaN":                               "util=NaN",
		"util=1e9":                               "util=1e9",
		"util":                                   "want term=weight",
		"util=0,energy=0":                        "every weight is 0",
		strings.Repeat("util=1;", MaxSettings+1): "more than 32",
	} {
		_, err := ParseSweep(in)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSweep(%.30q) = %v, want an ErrInvalid containing %q", in, err, want)
		}
	}
}

func TestParseModels(t *testing.T) {
	m, err := ParseModels([]byte("model,price_per_gpu_hour,idle_w\nT4,0.35,\nX9,2,40\n"), "m.csv", DefaultModels())
	if err != nil {
		t.Fatal(err)
	}
	if p := m["T4"]; p.PricePerHour != 0.35 || p.BusyWatts != 70 || p.IdleWatts != 10 {
		t.Fatalf("T4 %+v: price set, watts kept from the defaults", p)
	}
	if p := m["X9"]; p.BusyWatts != Generic.BusyWatts || p.IdleWatts != 40 || p.PricePerHour != 2 {
		t.Fatalf("X9 %+v: unknown model starts from Generic", p)
	}
	if p := m["V100M32"]; p.BusyWatts != 300 {
		t.Fatalf("V100M32 %+v: defaults kept", p)
	}
	for in, want := range map[string]string{
		"busy_w\n300\n":                  "no model column",
		"model,watts\nT4,3\n":            `column "watts"`,
		"model,busy_w\nT4,-3\n":          "m.csv:2: invalid objective: column busy_w",
		"model,busy_w\nT4,100\nT4,200\n": "listed twice",
		"model,busy_w\nT4,5\n":           "idle_w <= busy_w",
		"model,busy_w\n,5\n":             "column model",
	} {
		_, err := ParseModels([]byte(in), "m.csv", DefaultModels())
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseModels(%q) = %v, want %q", in, err, want)
		}
	}
}

func TestJain(t *testing.T) {
	if j := Jain([]float64{1, 1, 1}); j != 1 {
		t.Fatalf("equal: %v", j)
	}
	if j := Jain([]float64{1, 0, 0, 0}); j != 0.25 {
		t.Fatalf("one has all: %v", j)
	}
}

func FuzzParseSweep(f *testing.F) {
	for _, s := range []string{"util=1;wait=1", "default", "energy=1,cost=2\n#x\nfair=1", "util=1e400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseSweep(s)
		if err != nil {
			return
		}
		if len(got) == 0 || len(got) > MaxSettings {
			t.Fatalf("%d settings", len(got))
		}
		for _, st := range got {
			if st.Objective == nil {
				continue
			}
			if err := st.Objective.Validate(); err != nil {
				t.Fatalf("accepted an invalid objective %+v: %v", st.Objective, err)
			}
			// The label reads back to the same weights.
			again, err := ParseSweep(st.Label)
			if a, b := again[0].Objective, st.Objective; err != nil || a.Util != b.Util || a.Wait != b.Wait || a.Fair != b.Fair || a.Energy != b.Energy || a.Cost != b.Cost {
				t.Fatalf("label %q does not read back: %v", st.Label, err)
			}
		}
	})
}

func FuzzParseModels(f *testing.F) {
	f.Add([]byte("model,busy_w,idle_w,off_w,price_per_gpu_hour\nT4,70,10,0,0.35\n"))
	f.Add([]byte("model\nA\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseModels(data, "f", nil)
		if err != nil {
			return
		}
		for k, p := range m {
			if !(p.OffWatts <= p.IdleWatts && p.IdleWatts <= p.BusyWatts && p.BusyWatts <= MaxWatts && p.OffWatts >= 0 && p.PricePerHour >= 0 && p.PricePerHour <= MaxPrice) {
				t.Fatalf("model %q accepted out of range: %+v", k, p)
			}
		}
	})
}

func TestParseSetting(t *testing.T) {
	o, err := ParseSetting("util=1,fair=1")
	if err != nil || o == nil || o.Util != 1 || o.Fair != 1 || o.Energy != 0 {
		t.Fatalf("ParseSetting(util=1,fair=1) = %+v, %v", o, err)
	}
	if o, err := ParseSetting("default"); err != nil || o != nil {
		t.Fatalf("default: %+v, %v; want nil (today's policy)", o, err)
	}
	for in, want := range map[string]string{"util=1;energy=1": "one setting only", "": "no setting", "speed=2": `unknown term "speed"`} {
		if _, err := ParseSetting(in); err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSetting(%q) = %v, want %q", in, err, want)
		}
	}
}

// A GPU's productName finds its model as a word of it, the longest first.
func TestMatch(t *testing.T) {
	m := DefaultModels()
	m["L40S"] = jobs.ModelPower{BusyWatts: 350, IdleWatts: 30}
	for product, want := range map[string]jobs.ModelPower{
		"H100":                  m["H100"],
		"NVIDIA H100 80GB HBM3": m["H100"],
		"A100-SXM4-40GB":        m["A100"],
		"NVIDIA L40S":           m["L40S"],
		"NVIDIA L4":             m["L4"],
		"NVIDIA A10G":           Generic, // not A10
		"Tesla V100-SXM2-16GB":  Generic, // the table's V100s are V100M16, V100M32
		"":                      Generic,
	} {
		if got := Match(m, product); got != want {
			t.Errorf("Match(%q) = %+v, want %+v", product, got, want)
		}
	}
}
