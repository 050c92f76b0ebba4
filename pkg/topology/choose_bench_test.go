package topology

import (
	"fmt"
	"testing"
)

func BenchmarkChoose(b *testing.B) {
	for _, tc := range []struct{ gpus, perSwitch, n int }{{8, 2, 1}, {8, 2, 2}, {8, 2, 4}, {64, 8, 8}, {64, 8, 16}} {
		inv := pcieNode(tc.gpus, tc.perSwitch)
		m := New(inv)
		free := m.IDs()
		b.Run(fmt.Sprintf("gpus=%d/n=%d", tc.gpus, tc.n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Choose(free, tc.n, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
