package view

import (
	"testing"
)

// TestUsageCacheRecounts: a view's usage changed and not undone (a
// decider's bug) is carried to the next views, but no further than the
// next recount, which counts the claims afresh.
func TestUsageCacheRecounts(t *testing.T) {
	c := mixedCluster(t, 3)
	versioned(c)
	c.in.Pools, c.in.Usage = NewPoolCache(), NewUsageCache()
	v := c.build(t)
	allocs, err := place(t, v, Options{}, claim("leak", fraction("gpu", "10Gi", "")))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Assume(allocs...); err != nil { // never undone
		t.Fatal(err)
	}
	held := func(v *View) bool {
		for _, a := range allocs {
			for _, r := range a.Result.Devices.Results {
				if d := v.device(r.Pool, r.Device); d != nil && v.usage.dev[d.id].allocated() {
					return true
				}
			}
		}
		return false
	}
	carried := 0
	for range recountEvery {
		v = c.build(t)
		if !held(v) {
			break
		}
		carried++
	}
	if carried == 0 {
		t.Fatal("the next view did not carry the usage over (the cache does nothing)")
	}
	if held(v) {
		t.Fatalf("the leaked allocation still counted after %d views", recountEvery)
	}
}
