#!/usr/bin/env bash
# tests.sh: make test's test run. Every package but ./test runs with the race
# detector; ./test (the end-to-end tests: real API servers, nodes, and gpud
# binaries it builds itself, without -race) runs without it, in a second go
# test at the same time. Its dependencies are then the ones go vet and
# hack/k8s-bins.sh have already compiled, so its ~15-minute run starts at
# once instead of after the race build of every package (minutes on a fresh
# machine) and overlaps that build. Each package's own unit tests keep the
# race detector. ./test's output is printed when it ends, after the others'.
#
# Test binaries link without symbol table and DWARF (-s -w): about a
# hundred links, each of a large binary, are a good part of a fresh
# machine's run, and a test's panic and race reports keep their function
# names and lines (the runtime's own tables).
#
# TEST_P is the race run's go test -p; E2E_TIMEOUT and UNIT_TIMEOUT are
# each run's -timeout. Exits non-zero if either run failed.
set -uo pipefail
go=${GO:-go}
p=${TEST_P:-2}
e2e_out=$(mktemp)
trap 'rm -f "$e2e_out"' EXIT
mapfile -t pkgs < <("$go" list ./... | grep -vx 'github.com/gpud/gpud/test')
"$go" test -ldflags='-s -w' -timeout "${E2E_TIMEOUT:-25m}" ./test/ >"$e2e_out" 2>&1 &
e2e=$!
"$go" test -ldflags='-s -w' -race -p "$p" -timeout "${UNIT_TIMEOUT:-25m}" "${pkgs[@]}"
unit_rc=$?
echo "tests: race run done at $(date +%T) (rc $unit_rc); waiting for ./test"
wait "$e2e"
e2e_rc=$?
cat "$e2e_out"
echo "tests: ./test done at $(date +%T) (rc $e2e_rc)"
[ "$unit_rc" -eq 0 ] && [ "$e2e_rc" -eq 0 ]
