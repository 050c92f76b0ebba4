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
# version gpud's k8s.io modules are pinned to (hack/kube-bins.sh builds them
# with kube-apiserver and kube-scheduler), containerd from
# github.com/containerd/containerd/v2 at $GPUD_CONTAINERD_VERSION (default
# below; test/nodeenv expects the same).
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
	# .stamped: built with the release in version.Version (a directory
	# from before, which reported "2.2.9+unknown", is rebuilt).
	all_there "$ctrd_dir" containerd ctr containerd-shim-runc-v2 && [ -f "$ctrd_dir/.stamped" ] && return 0
	mkdir -p "$ctrd_dir"
	local tmp; tmp=$(mktemp -d "$ctrd_dir/.build.XXXXXX")
	# containerd's module has no replace directives, so `go install
	# pkg@version` builds it exactly as released. Static (no cgo), without
	# the snapshotters that need C libraries. The release goes into
	# version.Version as containerd's Makefile puts it there: the runtime
	# reports it (the Node's containerRuntimeVersion), and NRI plugins
	# infer the runtime's NRI version from it, which "+unknown" defeats.
	GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath -tags 'no_btrfs no_devmapper no_zfs' \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version" \
		"github.com/containerd/containerd/v2/cmd/containerd@$containerd_version" \
		"github.com/containerd/containerd/v2/cmd/ctr@$containerd_version" \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$containerd_version" >&2
	mv -f "$tmp"/* "$ctrd_dir/"
	rmdir "$tmp"
	touch "$ctrd_dir/.stamped"
}

build_kube() {
	all_there "$kube_dir" kubelet kube-controller-manager && [ -e "$kube_dir/kubelet.stamped" ] &&
		[ -e "$kube_dir/kube-controller-manager.stamped" ] && return 0
	# One `go build` for whichever of the four Kubernetes binaries are
	# missing (kube-apiserver and kube-scheduler too: the real node needs
	# them, and building them together shares the work).
	./hack/kube-bins.sh
}

case "${1:-all}" in
containerd) build_containerd ;;
kube) build_kube ;;
all) build_containerd; build_kube ;;
*) echo "usage: $0 [all|containerd|kube]" >&2; exit 2 ;;
esac
echo "$kube_dir"
echo "$ctrd_dir"
