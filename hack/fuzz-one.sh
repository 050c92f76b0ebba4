#!/usr/bin/env bash
# fuzz-one.sh DIR NAME FUZZTIME: go test -fuzz one target, as make fuzz
# runs each. Go 1.26's fuzz coordinator can fail a target with a bare
# "context deadline exceeded" as -fuzztime ends while a worker is mid-call
# (golang/go#75804, fixed in Go 1.27): nothing failed and no input is
# written. Such a run is retried once; a second one fails. A real finding
# ("Failing input written to ...") or any other error fails at once.
set -uo pipefail
dir=$1 name=$2 fuzztime=$3
go=${GO:-go}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for attempt in 1 2; do
	"$go" test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir" 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	[ "$rc" -eq 0 ] && exit 0
	if [ "$attempt" -eq 1 ] && grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written to' "$out"; then
		echo "fuzz: $name in $dir ended on Go's -fuzztime deadline race (golang/go#75804), no input failed; running it once more"
		continue
	fi
	exit "$rc"
done
