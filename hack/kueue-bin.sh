#!/usr/bin/env bash
# Builds Kueue's controller manager (sigs.k8s.io/kueue/cmd/kueue) at a pinned
# version through the Go module proxy, in a throwaway module of its own (so
# gpud's go.mod and go.sum are untouched and Kueue's dependencies are exactly
# the versions Kueue's own go.mod selects), and copies Kueue's CRD manifests
# (config/components/crd/bases of the same module zip) next to it. Prints the
# directory. Does nothing (but print it) when the manager and the CRDs are
# already there: only the first build is slow (see .ci/run for the measured
# time).
#
# The directory is $GPUD_KUEUE_BINS/<version>, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/gpud/kueue/<version>, holding
#
#   kueue-manager   the controller manager (CGO_ENABLED=0)
#   crds/*.yaml     Kueue's CRDs (kueue.x-k8s.io), as the module ships them
#
# test/kueue_test.go looks them up by the same rule (GPUD_KUEUE_VERSION
# overrides the version for both).
set -euo pipefail
cd "$(dirname "$0")/.."
version="${GPUD_KUEUE_VERSION:-v0.17.0}"
dir="${GPUD_KUEUE_BINS:-${XDG_CACHE_HOME:-$HOME/.cache}/gpud/kueue}/$version"
if [ -x "$dir/kueue-manager" ] && [ -s "$dir/crds/kueue.x-k8s.io_clusterqueues.yaml" ]; then
	echo "$dir"
	exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off
(
	cd "$work"
	go mod init gpud.local/kueue-bin >/dev/null 2>&1
	# Kueue is the only requirement, so minimal version selection keeps every
	# dependency at the version Kueue's go.mod lists.
	go get "sigs.k8s.io/kueue@$version" >&2
	go build -trimpath \
		-ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version" \
		-o "$work/kueue-manager" sigs.k8s.io/kueue/cmd/kueue >&2
)
mod_dir=$(cd "$work" && go list -m -f '{{.Dir}}' "sigs.k8s.io/kueue")
mkdir -p "$dir/crds"
cp "$mod_dir"/config/components/crd/bases/*.yaml "$dir/crds/"
chmod u+w "$dir"/crds/*.yaml
mv "$work/kueue-manager" "$dir/kueue-manager.tmp"
mv "$dir/kueue-manager.tmp" "$dir/kueue-manager"
echo "$dir"
