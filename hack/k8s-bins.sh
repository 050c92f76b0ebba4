#!/usr/bin/env bash
# Builds kube-apiserver and kube-scheduler from k8s.io/kubernetes at the
# version gpud's k8s.io modules are pinned to, through the Go module proxy,
# into a versioned cache directory outside the repo. Prints that directory.
# Does nothing (but print it) when both binaries are already there: only the
# first build is slow (hack/kube-bins.sh builds them with the kubelet and
# kube-controller-manager; see .ci/run for measured times).
#
# The directory is $GPUD_K8S_BINS/<version>, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/gpud/k8s-bins/<version>; a GPUD_K8S_BINS
# that already holds both binaries (what this script printed) is used as it
# is. test/k8senv looks them up by the same rule; etcd comes from $PATH
# (Debian's etcd-server) unless that directory holds one.
set -euo pipefail
cd "$(dirname "$0")/.."
api_version=$(go list -m -f '{{.Version}}' k8s.io/api)        # v0.37.x
kube_version="v1${api_version#v0}"                             # v1.37.x
root="${GPUD_K8S_BINS:-${XDG_CACHE_HOME:-$HOME/.cache}/gpud/k8s-bins}"
dir="$root/$kube_version"
if [ -x "$root/kube-apiserver" ] && [ -x "$root/kube-scheduler" ]; then
	dir="$root"
fi
# A cached build needs its version stamp (hack/kube-bins.sh: <bin>.stamped);
# binaries put straight under <root> are taken as they are.
if [ -x "$dir/kube-apiserver" ] && [ -x "$dir/kube-scheduler" ] &&
	{ [ "$dir" = "$root" ] || { [ -e "$dir/kube-apiserver.stamped" ] && [ -e "$dir/kube-scheduler.stamped" ]; }; }; then
	echo "$dir"
	exit 0
fi
# One `go build` makes all four Kubernetes binaries (see hack/kube-bins.sh),
# so hack/node-bins.sh then finds the kubelet and kube-controller-manager.
./hack/kube-bins.sh
echo "$dir"
