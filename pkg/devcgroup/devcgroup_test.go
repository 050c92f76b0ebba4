package devcgroup

import (
	"strings"
	"testing"
)

func TestProgramDisassembly(t *testing.T) {
	insns, err := Program(Allowed{GPUMinors: []uint32{3, 1, 3}, CapsMajor: 508, CapMinors: []uint32{12, 13}, UVMMajor: 510})
	if err != nil {
		t.Fatal(err)
	}
	want := `	 0: LdXMemW dst: r2 src: r1 off: 0 imm: 0
	 1: AndImm32 dst: r2 imm: 65535
	 2: LdXMemW dst: r3 src: r1 off: 4 imm: 0
	 3: LdXMemW dst: r4 src: r1 off: 8 imm: 0
	 4: JNEImm dst: r2 off: -1 imm: 2 <allow>
	 5: JEqImm dst: r3 off: -1 imm: 510 <allow>
	 6: JEqImm dst: r3 off: -1 imm: 195 <gpu>
	 7: JEqImm dst: r3 off: -1 imm: 508 <caps>
allow:
	 8: MovImm dst: r0 imm: 1
	 9: Exit
gpu:
	10: JEqImm dst: r4 off: -1 imm: 255 <allow>
	11: JEqImm dst: r4 off: -1 imm: 1 <allow>
	12: JEqImm dst: r4 off: -1 imm: 3 <allow>
deny:
	13: MovImm dst: r0 imm: 0
	14: Exit
caps:
	15: JEqImm dst: r4 off: -1 imm: 12 <allow>
	16: JEqImm dst: r4 off: -1 imm: 13 <allow>
	17: Ja off: -1 <deny>
`
	if got := insns.String(); got != want {
		t.Errorf("Program() =\n%s\nwant\n%s", got, want)
	}
}

func TestProgramNoGPUsNoCaps(t *testing.T) {
	insns, err := Program(Allowed{})
	if err != nil {
		t.Fatal(err)
	}
	got := insns.String()
	if strings.Contains(got, "caps") || !strings.Contains(got, "imm: 255 <allow>") {
		t.Errorf("Program(zero) =\n%s\nwant only nvidiactl allowed of 195 and no caps branch", got)
	}
}

func TestProgramNoCapsAllowed(t *testing.T) {
	insns, err := Program(Allowed{CapsMajor: 508})
	if err != nil {
		t.Fatal(err)
	}
	if got := insns.String(); !strings.Contains(got, "caps:\n") || !strings.Contains(got, "caps:\n\t12: Ja off: -1 <deny>") {
		t.Errorf("Program(caps, none allowed) =\n%s\nwant a caps branch that jumps to deny", got)
	}
}

func TestAllowedValidate(t *testing.T) {
	tests := []struct {
		name    string
		a       Allowed
		wantErr bool
	}{
		{name: "zero"},
		{name: "typical", a: Allowed{GPUMinors: []uint32{0}, CapsMajor: 508, UVMMajor: 510}},
		{name: "caps is 195", a: Allowed{CapsMajor: 195}, wantErr: true},
		{name: "uvm is caps", a: Allowed{CapsMajor: 508, UVMMajor: 508}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.a.Validate(); (err != nil) != tc.wantErr {
				t.Errorf("Validate() = %v, wantErr %v", err, tc.wantErr)
			}
		})
	}
}

func TestParseProcDevices(t *testing.T) {
	in := `Character devices:
  1 mem
195 nvidia-frontend
236 nvidia-nvswitch
508 nvidia-caps
510 nvidia-uvm

Block devices:
510 nvidia-uvm
`
	m, err := ParseProcDevices(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if m != (Majors{UVM: 510, Caps: 508}) {
		t.Errorf("ParseProcDevices = %+v, want uvm 510 caps 508", m)
	}
}

func TestCapMinorMatchesDriverFile(t *testing.T) {
	// Lines in the form and numbering of the driver's
	// /proc/driver/nvidia-caps/mig-minors.
	file := "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu0/gi14/ci7/access 137\ngpu1/gi0/access 138\ngpu7/gi2/ci1/access 968\n"
	m, err := ParseMIGMinors(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	check := []struct {
		key       string
		g, gi, ci int
	}{
		{"gpu0/gi0/access", 0, 0, -1}, {"gpu0/gi0/ci0/access", 0, 0, 0}, {"gpu0/gi1/access", 0, 1, -1},
		{"gpu0/gi1/ci0/access", 0, 1, 0}, {"gpu0/gi14/ci7/access", 0, 14, 7}, {"gpu1/gi0/access", 1, 0, -1},
		{"gpu7/gi2/ci1/access", 7, 2, 1},
	}
	for _, c := range check {
		if got := CapMinor(c.g, c.gi, c.ci); got != m[c.key] {
			t.Errorf("CapMinor(%s) = %d, want %d", c.key, got, m[c.key])
		}
	}
}
