package enforceagent

import (
	"testing"

	"github.com/gpud/gpud/pkg/devcgroup"
	"github.com/gpud/gpud/pkg/devnodes"
)

func TestSimMajors(t *testing.T) {
	tests := []struct {
		name        string
		in          devcgroup.Majors
		simDevFiles bool
		want        devcgroup.Majors
	}{
		{name: "real node keeps what /proc/devices says", in: devcgroup.Majors{}, want: devcgroup.Majors{}},
		{name: "simulated device files get the simulated majors", in: devcgroup.Majors{}, simDevFiles: true,
			want: devcgroup.Majors{UVM: devnodes.SimUVMMajor, Caps: devnodes.SimCapsMajor}},
		{name: "majors the kernel lists are kept", in: devcgroup.Majors{UVM: 510, Caps: 511}, simDevFiles: true,
			want: devcgroup.Majors{UVM: 510, Caps: 511}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := simMajors(tc.in, tc.simDevFiles); got != tc.want {
				t.Errorf("simMajors(%+v, %t) = %+v, want %+v", tc.in, tc.simDevFiles, got, tc.want)
			}
		})
	}
}
