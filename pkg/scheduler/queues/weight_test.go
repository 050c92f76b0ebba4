package queues

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// spec.weight takes an integer (what Queues stored before decimals) or a
// decimal string, as the --queues file's weight takes fractions; a bad
// value is refused naming spec.weight and what it takes.
func TestWeight(t *testing.T) {
	tests := []struct {
		name    string
		weight  any // as the API server returns it
		want    float64
		wantErr string
	}{
		{name: "stored integer", weight: int64(3), want: 3},
		{name: "absent is the default", weight: nil, want: 0},
		{name: "decimal string", weight: "2.5", want: 2.5},
		{name: "integer string", weight: "7", want: 7},
		{name: "milli", weight: "0.125", want: 0.125},
		{name: "maximum", weight: "1000000", want: MaxWeight},
		{name: "negative integer", weight: int64(-1), wantErr: "spec.weight: Invalid value: \"-1\""},
		{name: "above the maximum", weight: int64(MaxWeight + 1), wantErr: "want 0 to 1000000"},
		{name: "string above the maximum", weight: "1000000.5", wantErr: `spec.weight: Invalid value: "1000000.5"`},
		{name: "four decimals", weight: "2.5001", wantErr: "at most 3 decimals"},
		{name: "not a number", weight: "heavy", wantErr: `spec.weight: Invalid value: "heavy"`},
		{name: "exponent", weight: "1e3", wantErr: "spec.weight"},
		{name: "negative string", weight: "-2", wantErr: "spec.weight"},
		{name: "NaN", weight: "NaN", wantErr: "spec.weight"},
		// The CRD schema refuses a number with decimals before gpud sees it.
		{name: "float number", weight: 2.5, wantErr: "cannot unmarshal number 2.5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := map[string]any{}
			if tc.weight != nil {
				spec["weight"] = tc.weight
			}
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": GroupVersion.String(), "kind": Kind,
				"metadata": map[string]any{"name": "q"}, "spec": spec}}
			q, err := FromUnstructured(u)
			if err == nil {
				jq, _, cerr := Convert(q)
				if cerr == nil && tc.wantErr == "" {
					if jq.Weight != tc.want {
						t.Fatalf("weight %v, want %v", jq.Weight, tc.want)
					}
					return
				}
				err = cerr
			}
			if tc.wantErr == "" {
				t.Fatalf("refused: %v", err)
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want ErrInvalid saying %q", err, tc.wantErr)
			}
		})
	}
}
