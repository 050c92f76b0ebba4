#!/usr/bin/env bash
# Builds what a real node in the test suite runs (test/nodeenv), through the
# Go module proxy, into versioned cache directories outside the repo, and
# prints them, one a line:
#
#   <root>/<kube version>            kubelet, kube-controller-manager
#   <root>/containerd-<version>      containerd, ctr, containerd-shim-runc-v2
#
# <root> is $GPUD_NODE_BINS, else ${XDG_CACHE_HOME:-$HOME/.cache}/gpud/node-bins.
# The kubelet and kube-controller-manager come from k8s.io/kubernetes at the
# version gpud's k8s.io modules are pinned to (as hack/k8s-bins.sh builds
# kube-apiserver), containerd from github.com/containerd/containerd/v2 at
# $GPUD_CONTAINERD_VERSION (default below; test/nodeenv expects the same).
# A directory whose binaries are all there is left as it is: only the first
# build is slow. runc and the CNI plugins come from Debian (`apt-get install
# runc containernetworking-plugins`), not from here.
set -euo pipefail
cd "$(dirname "$0")/.."
containerd_version="${GPUD_CONTAINERD_VERSION:-v2.2.9}"
api_version=$(go list -m -f '{{.Version}}' k8s.io/api)        # v0.37.x
kube_version="v1${api_version#v0}"                             # v1.37.x
root="${GPUD_NODE_BINS:-${XDG_CACHE_HOME:-$HOME/.cache}/gpud/node-bins}"
kube_dir="$root/$kube_version"
ctrd_dir="$root/containerd-$containerd_version"

all_there() { # dir bin...
	local d=$1; shift
	for b in "$@"; do [ -x "$d/$b" ] || return 1; done
}

build_containerd() {
	all_there "$ctrd_dir" containerd ctr containerd-shim-runc-v2 && return 0
	mkdir -p "$ctrd_dir"
	local tmp; tmp=$(mktemp -d "$ctrd_dir/.build.XXXXXX")
	# containerd's module has no replace directives, so `go install
	# pkg@version` builds it exactly as released. Static (no cgo), without
	# the snapshotters that need C libraries.
	GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath -tags 'no_btrfs no_devmapper no_zfs' \
		"github.com/containerd/containerd/v2/cmd/containerd@$containerd_version" \
		"github.com/containerd/containerd/v2/cmd/ctr@$containerd_version" \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$containerd_version" >&2
	mv "$tmp"/* "$ctrd_dir/"
	rmdir "$tmp"
}

build_kube() {
	all_there "$kube_dir" kubelet kube-controller-manager && return 0
	mkdir -p "$kube_dir"
	local work; work=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" EXIT
	(
		cd "$work"
		go mod init gpud-node-bins >/dev/null 2>&1
		modfile=$(go mod download -json "k8s.io/kubernetes@$kube_version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
		# k8s.io/kubernetes replaces its staging modules with local paths;
		# point them at the published staging modules of the same release.
		{
			echo "require k8s.io/kubernetes $kube_version"
			echo "replace ("
			sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$api_version"'#p' "$modfile"
			echo ")"
		} >>go.mod
		cat >tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
		go mod tidy -e >&2 2>/dev/null || true
		go get "k8s.io/kubernetes@$kube_version" >&2
		for b in kubelet kube-controller-manager; do
			[ -x "$kube_dir/$b" ] && continue
			CGO_ENABLED=0 go build -trimpath -o "$kube_dir/$b.tmp" "k8s.io/kubernetes/cmd/$b" >&2
			mv "$kube_dir/$b.tmp" "$kube_dir/$b"
		done
	)
}

case "${1:-all}" in
containerd) build_containerd ;;
kube) build_kube ;;
all) build_containerd; build_kube ;;
*) echo "usage: $0 [all|containerd|kube]" >&2; exit 2 ;;
esac
echo "$kube_dir"
echo "$ctrd_dir"
