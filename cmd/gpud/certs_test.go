package main

import (
	"io"
	"strings"
	"testing"
)

func TestCertsFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--namespace", "Bad_NS"}, "--namespace"},
		// Per-node certificates are gone: each flag that chose nodes is
		// refused with why, whatever its value.
		{[]string{"--nodes", "node-c"}, "--nodes"},
		{[]string{"--nodes", ","}, "no longer get per-node certificates"},
		{[]string{"--node-selector", "nvidia.com/gpu.present=true"}, "--node-selector"},
		{[]string{"--validity", "1m"}, "--validity"},
		{[]string{"--validity", "48h", "--ca-validity", "24h"}, "--ca-validity"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			err := runCerts(t.Context(), tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
