package jobsim

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadQueueFile(t *testing.T) {
	write := func(t *testing.T, body string) string {
		t.Helper()
		p := filepath.Join(t.TempDir(), "queues.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := `queues:
  - name: org
    limit: {gpuMilli: 4000000}
  - name: prod
    parent: org
    weight: 2
    guaranteed: {gpuMilli: 1000000, migSlices: 14}
    modelLimit: {V100M32: 500000}
  - name: batch
reservations:
  - {name: nightly, queue: prod, nodes: [openb-node-0001], startS: 3600, endS: 7200}
`
	qs, rs, err := ReadQueueFile(write(t, good))
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 3 || qs[1].Parent != "org" || qs[1].Weight != 2 || qs[1].Quota.Guaranteed.GPUMilli != 1000000 ||
		qs[1].Quota.Guaranteed.MIGSlices != 14 || qs[1].Quota.ModelLimit["V100M32"] != 500000 || qs[0].Quota.Limit.GPUMilli != 4000000 {
		t.Fatalf("queues %+v", qs)
	}
	if len(rs) != 1 || rs[0].Queue != "prod" || rs[0].Start != 3600 || rs[0].End != 7200 || rs[0].Nodes[0] != "openb-node-0001" {
		t.Fatalf("reservations %+v", rs)
	}

	bad := []struct{ name, body, want string }{
		{name: "unknown key", body: "queues:\n  - name: a\n    bogus: {}\n", want: `queues.yaml:3: unknown field "bogus"`},
		{name: "missing parent", body: "queues:\n  - name: a\n    parent: b\n", want: `queues.yaml:3: queue "a": parent "b" is not defined`},
		{name: "parent cycle", body: "queues:\n  - name: a\n    parent: b\n  - name: b\n    parent: a\n", want: `queues.yaml:3: queue "a": parent cycle`},
		{name: "duplicate", body: "queues:\n  - name: a\n  - name: a\n", want: `queues.yaml:3: queue "a" defined twice`},
		{name: "no queues", body: "queues: []\n", want: "queues.yaml:1: no queues"},
		{name: "empty file", body: "", want: "queues.yaml:1: no queues"},
		{name: "reservation queue", body: "queues:\n  - name: a\nreservations:\n  - {name: r, queue: z, nodes: [n], startS: 0, endS: 1}\n", want: `queues.yaml:4: reservation "r": queue "z" is not defined`},
		{name: "empty window", body: "queues:\n  - name: a\nreservations:\n  - name: r\n    queue: a\n    startS: 5\n    endS: 5\n", want: `queues.yaml:7: reservation "r": window [5, 5)`},
		{name: "fraction", body: "queues:\n  - name: a\n    guaranteed: {gpuMilli: 2.5}\n", want: "queues.yaml:3: 2.5 is not a whole number"},
		{name: "negative weight", body: "queues:\n  - name: a\n    weight: -1\n", want: `queues.yaml:3: queue "a": weight -1 outside`},
		{name: "negative limit", body: "queues:\n  - name: a\n    limit: {cpuMilli: -1}\n", want: `queues.yaml:2: queue "a": negative resource`},
		{name: "wrong type", body: "queues:\n  - name: a\n    weight: [1]\n", want: "queues.yaml:3: "},
		{name: "guarantee above limit", body: "queues:\n  - name: a\n    guaranteed: {gpuMilli: 8000}\n    limit: {gpuMilli: 4000}\n",
			want: `queues.yaml:3: queue "a": guaranteed gpuMilli 8000 exceeds its limit 4000`},
		{name: "model guarantee above limit", body: "queues:\n  - name: a\n    modelGuaranteed: {H100: 9000}\n    modelLimit: {H100: 1000}\n",
			want: `queue "a": guaranteed 9000 milli-GPU of H100 exceeds its limit 1000`},
		{name: "sum overflow", body: "queues:\n  - name: a\n    guaranteed: {gpuMilli: 9223372036854775807}\n  - name: b\n    guaranteed: {gpuMilli: 9223372036854775807}\n",
			want: `queue "a": a resource above 281474976710656`},
		{name: "negative model limit", body: "queues:\n  - name: a\n    modelLimit: {H100: -5}\n", want: `queue "a": milli-GPU of H100 -5 outside`},
		{name: "deep flow nesting", body: "queues: " + strings.Repeat("[", 1<<20), want: "queues.yaml:1: nested more than 32 levels deep"},
		{name: "deep block nesting", body: "queues:\n" + strings.Repeat("- ", 1<<20), want: "queues.yaml:2: nested more than 32 levels deep"},
		{name: "too many queues", body: "queues:\n" + strings.Repeat("  - {name: a}\n", MaxQueues+1), want: "queues.yaml:2: 10001 queues, more than 10000"},
		{name: "errors are capped", body: "queues:\n" + strings.Repeat("  - {name: a}\n", 100), want: "and 89 more errors"},
		{name: "alias", body: "x: &a [1]\nqueues: *a\n", want: "queues.yaml:2: YAML aliases are not supported"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ReadQueueFile(write(t, tc.body))
			if !errors.Is(err, ErrBadQueueFile) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// TestQueuesExample keeps the documented example readable.
func TestQueuesExample(t *testing.T) {
	qs, rs, err := ReadQueueFile("../../docs/queues-example.yaml")
	if err != nil || len(qs) != 5 || len(rs) != 1 {
		t.Fatalf("ReadQueueFile() = %d queues, %d reservations, %v", len(qs), len(rs), err)
	}
}
