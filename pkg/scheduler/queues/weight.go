package queues

import (
	"fmt"
	"regexp"
	"strconv"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// weightPattern is a decimal weight as a string: an integer of at most
// seven digits, then at most three decimals ("2", "2.5", "0.125"). The
// CRD's schema checks the same pattern.
var weightPattern = regexp.MustCompile(`^(0|[1-9][0-9]{0,6})(\.[0-9]{1,3})?$`)

// weightHelp says what spec.weight accepts, for errors.
var weightHelp = fmt.Sprintf(`want 0 to %d: an integer, or a decimal string of at most 3 decimals such as "2.5" (0 is 1)`, MaxWeight)

// IntWeight is an integer spec.weight.
func IntWeight(w int32) intstr.IntOrString { return intstr.FromInt32(w) }

// DecimalWeight is a decimal spec.weight ("2.5").
func DecimalWeight(w string) intstr.IntOrString { return intstr.FromString(w) }

// weightValue is spec.weight as the allocator's weight (0: the default,
// 1), or why it is not one: an integer (what the CRD took before decimals,
// still accepted) or a decimal string, either in [0, MaxWeight], as the
// --queues file's weight.
func weightValue(w intstr.IntOrString) (float64, error) {
	switch w.Type {
	case intstr.Int:
		if w.IntVal < 0 || w.IntVal > MaxWeight {
			return 0, fmt.Errorf("%d: %s", w.IntVal, weightHelp)
		}
		return float64(w.IntVal), nil
	case intstr.String:
		if !weightPattern.MatchString(w.StrVal) {
			return 0, fmt.Errorf("%q: %s", w.StrVal, weightHelp)
		}
		v, err := strconv.ParseFloat(w.StrVal, 64)
		if err != nil || v > MaxWeight {
			return 0, fmt.Errorf("%q: %s", w.StrVal, weightHelp)
		}
		return v, nil
	}
	return 0, fmt.Errorf("type %d: %s", w.Type, weightHelp)
}

// WeightString is spec.weight as written ("1" for the default 0).
func WeightString(w intstr.IntOrString) string {
	if w.Type == intstr.Int && w.IntVal == 0 {
		return "1"
	}
	return w.String()
}
