#!/usr/bin/env bash
# Builds the four Kubernetes binaries the tests run, from k8s.io/kubernetes
# at the version go.mod pins, into the directories test/k8senv and
# test/nodeenv look in (hack/k8s-bins.sh and hack/node-bins.sh call this):
#
#   kube-apiserver, kube-scheduler        -> hack/k8s-bins.sh's <root>/<version>
#   kubelet, kube-controller-manager      -> hack/node-bins.sh's <root>/<version>
#
# Only the missing ones are built, all in one `go build` (they share most of
# their packages, and go build compiles independent packages in parallel).
# They are built inside gpud's own module (a scratch copy of go.mod and
# go.sum through -modfile, so the checkout is untouched), with the flags
# `make lint` compiles with (no -trimpath, cgo as `go env` says, the
# Makefile's CGO_CFLAGS): go vet and staticcheck then find most of
# k8s.io/kubernetes' packages already in the build cache, and nothing is
# downloaded that the tests do not need anyway. k8s.io/kubernetes itself is
# exactly the pinned version; its dependencies are at the versions gpud's
# module graph selects (never older than upstream's go.mod, sometimes
# newer), which the real-Kubernetes and real-node tests accept.
set -euo pipefail
cd "$(dirname "$0")/.."
api_version=$(go list -m -f '{{.Version}}' k8s.io/api)        # v0.37.x
kube_version="v1${api_version#v0}"                             # v1.37.x
[ "$(go list -m -f '{{.Version}}' k8s.io/kubernetes)" = "$kube_version" ] || {
	echo "kube-bins: go.mod's k8s.io/kubernetes is not $kube_version" >&2; exit 1
}
k8s_dir="${GPUD_K8S_BINS:-${XDG_CACHE_HOME:-$HOME/.cache}/gpud/k8s-bins}/$kube_version"
node_dir="${GPUD_NODE_BINS:-${XDG_CACHE_HOME:-$HOME/.cache}/gpud/node-bins}/$kube_version"
# Same CGO_CFLAGS as make's (cgo packages hash it into their cache keys).
CGO_CFLAGS="${CGO_CFLAGS:-$(sed -n 's/^export CGO_CFLAGS ?= //p' Makefile)}"
export CGO_CFLAGS

# The binaries report kube_version (GET /version, the Node's kubelet
# version), as released ones do: clients that parse the server's version
# (Kueue's manager, kubectl's skew warning) refuse go build's default
# "v0.0.0-master+$Format:%H$". A binary built before the stamp (no
# <binary>.stamped beside it) is rebuilt; the packages come from the
# build cache, so that is a link.
# -s -w: no symbol table or DWARF (nobody debugs these test binaries; the
# links, the slow serial end of a cold build, get shorter).
minor=${kube_version#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"

pkgs=() dests=()
for pair in "kube-apiserver $k8s_dir" "kube-scheduler $k8s_dir" \
	"kubelet $node_dir" "kube-controller-manager $node_dir"; do
	b=${pair%% *} d=${pair#* }
	[ -x "$d/$b" ] && [ -e "$d/$b.stamped" ] && continue
	pkgs+=("k8s.io/kubernetes/cmd/$b") dests+=("$d")
done
[ ${#pkgs[@]} -eq 0 ] && exit 0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp go.mod "$work/go.mod"
cp go.sum "$work/go.sum"
# Adds the go.sum entries (and go.mod lines) the commands need beyond what
# gpud imports; gpud's graph already holds k8s.io/kubernetes' requirements,
# so no version moves.
go get -modfile="$work/go.mod" "${pkgs[@]/%/@$kube_version}" >&2
mkdir -p "$work/out"
go build -modfile="$work/go.mod" -ldflags "$ldflags" -o "$work/out/" "${pkgs[@]}" >&2
for i in "${!pkgs[@]}"; do
	b=${pkgs[$i]##*/}
	mkdir -p "${dests[$i]}"
	mv "$work/out/$b" "${dests[$i]}/$b.tmp"
	mv "${dests[$i]}/$b.tmp" "${dests[$i]}/$b"
	echo "$kube_version" > "${dests[$i]}/$b.stamped"
done
