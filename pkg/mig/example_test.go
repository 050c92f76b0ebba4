package mig_test

import (
	"errors"
	"fmt"

	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/simnode"
)

// layouts is a mig-parted layout file, as `gpud mig apply --layouts` reads
// it: GPU 0 is split into one 3g.40gb and three 1g.10gb slices, GPU 1 into
// seven 1g.10gb slices; the other GPUs are left as they are.
const layouts = `version: v1
mig-configs:
  training-and-inference:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.40gb": 1, "1g.10gb": 3}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  too-big:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2, "1g.10gb": 1}
  a100-names:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
`

// Example shows the planning half of the MIG flow on a simulated DGX H100:
// read the GPUs' state and catalogs, resolve a named layout against them,
// and plan the steps the applier would run. Nothing is changed: NewPlan is
// pure, so `gpud mig plan` can print the same steps before an apply.
func Example() {
	node := simnode.NewBuiltin("dgx-h100") // stands in for nvml.New()
	state, err := mig.ReadState(node)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("gpu 0 is %s; MIG profiles: %v\n", state.GPUs[0].Name, state.GPUs[0].Catalog.Names())

	f, err := mig.ParseLayoutFile([]byte(layouts))
	if err != nil {
		fmt.Println(err)
		return
	}
	want, err := f.Resolve("training-and-inference", state)
	if err != nil {
		fmt.Println(err)
		return
	}
	plan, err := mig.NewPlan(state, want, nil, mig.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range plan.Steps() {
		fmt.Println(s)
	}

	// A layout that does not fit the GPU is refused at plan time with a
	// *PlacementError (errors.Is ErrNoFit), before any GPU is touched.
	want, err = f.Resolve("too-big", state)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = mig.NewPlan(state, want, nil, mig.Options{})
	fmt.Println(errors.Is(err, mig.ErrNoFit), err)
	// Output:
	// gpu 0 is NVIDIA H100 80GB HBM3; MIG profiles: [1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb]
	// gpu 0: enable MIG mode
	// gpu 0: create 3g.40gb at 0-3
	// gpu 0: create 1g.10gb at 4-4
	// gpu 0: create 1g.10gb at 5-5
	// gpu 0: create 1g.10gb at 6-6
	// gpu 1: enable MIG mode
	// gpu 1: create 1g.10gb at 0-0
	// gpu 1: create 1g.10gb at 1-1
	// gpu 1: create 1g.10gb at 2-2
	// gpu 1: create 1g.10gb at 3-3
	// gpu 1: create 1g.10gb at 4-4
	// gpu 1: create 1g.10gb at 5-5
	// gpu 1: create 1g.10gb at 6-6
	// true mig: gpu 0: 1g.10gb + 3g.40gb + 3g.40gb do not fit under the placement rules
}

// ExampleLayoutFile_Resolve shows the validation a layout gets against the
// GPUs it lands on: a profile name the GPU's catalog lacks (an A100 40GB
// name on H100s) is an error naming the layout, the GPUs and what they
// offer, reported once for all the GPUs it concerns.
func ExampleLayoutFile_Resolve() {
	state, err := mig.ReadState(simnode.NewBuiltin("dgx-h100"))
	if err != nil {
		fmt.Println(err)
		return
	}
	f, err := mig.ParseLayoutFile([]byte(layouts))
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = f.Resolve("a100-names", state)
	fmt.Println(errors.Is(err, mig.ErrUnknownProfile), err)
	// Output:
	// true mig-configs "a100-names" entry 0: gpu 0,1,2,3,4,5,6,7 (NVIDIA H100 80GB HBM3): mig: unknown profile "1g.5gb": this GPU offers 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb
}
