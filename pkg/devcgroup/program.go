package devcgroup

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// The device cgroup program's context (struct bpf_cgroup_dev_ctx) and
// values from include/uapi/linux/bpf.h.
const (
	ctxAccessType = 0 // u32: access << 16 | type
	ctxMajor      = 4 // u32
	ctxMinor      = 8 // u32

	devTypeChar = 2 // BPF_DEVCG_DEV_CHAR
)

// Program builds the device filter for a: it returns 1 (allow) for every
// block device, every character device outside major 195 and the caps
// major, nvidiactl, the uvm major and the allowed minors; 0 (refuse) for
// the rest of 195:* and the caps major. It is pure; compare its String()
// in tests.
func Program(a Allowed) (asm.Instructions, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	a = a.Normalize()
	for _, m := range append(append([]uint32(nil), a.GPUMinors...), a.CapMinors...) {
		if m > 1<<31-1 {
			return nil, fmt.Errorf("devcgroup: minor %d does not fit an immediate", m)
		}
	}
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, ctxAccessType, asm.Word),
		asm.And.Imm32(asm.R2, 0xffff),
		asm.LoadMem(asm.R3, asm.R1, ctxMajor, asm.Word),
		asm.LoadMem(asm.R4, asm.R1, ctxMinor, asm.Word),
		asm.JNE.Imm(asm.R2, devTypeChar, "allow"),
	}
	if a.UVMMajor != 0 {
		insns = append(insns, asm.JEq.Imm(asm.R3, int32(a.UVMMajor), "allow"))
	}
	insns = append(insns, asm.JEq.Imm(asm.R3, GPUMajor, "gpu"))
	if a.CapsMajor != 0 {
		insns = append(insns, asm.JEq.Imm(asm.R3, int32(a.CapsMajor), "caps"))
	}
	insns = append(insns,
		asm.Mov.Imm(asm.R0, 1).WithSymbol("allow"),
		asm.Return(),
		asm.JEq.Imm(asm.R4, CtlMinor, "allow").WithSymbol("gpu"),
	)
	for _, m := range a.GPUMinors {
		insns = append(insns, asm.JEq.Imm(asm.R4, int32(m), "allow"))
	}
	insns = append(insns,
		asm.Mov.Imm(asm.R0, 0).WithSymbol("deny"),
		asm.Return(),
	)
	if a.CapsMajor != 0 {
		first := true
		for _, m := range a.CapMinors {
			ins := asm.JEq.Imm(asm.R4, int32(m), "allow")
			if first {
				ins = ins.WithSymbol("caps")
				first = false
			}
			insns = append(insns, ins)
		}
		ja := asm.Ja.Label("deny")
		if first {
			ja = ja.WithSymbol("caps")
		}
		insns = append(insns, ja)
	}
	return insns, nil
}
