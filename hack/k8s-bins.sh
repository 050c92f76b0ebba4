#!/usr/bin/env bash
# Builds kube-apiserver and kube-scheduler from k8s.io/kubernetes at the
# version gpud's k8s.io modules are pinned to, through the Go module proxy,
# into a versioned cache directory outside the repo. Prints that directory.
# Does nothing (but print it) when both binaries are already there: only the
# first build is slow (~25 min on 2 cores).
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
if [ -x "$dir/kube-apiserver" ] && [ -x "$dir/kube-scheduler" ]; then
	echo "$dir"
	exit 0
fi
mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init gpud-k8s-bins >/dev/null 2>&1
modfile=$(go mod download -json "k8s.io/kubernetes@$kube_version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
# k8s.io/kubernetes replaces its staging modules with local paths; point them
# at the published staging modules of the same release instead.
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
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
go mod tidy -e >&2 2>/dev/null || true
go get "k8s.io/kubernetes@$kube_version" >&2
CGO_ENABLED=0 go build -trimpath -o "$dir/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver >&2
CGO_ENABLED=0 go build -trimpath -o "$dir/kube-scheduler.tmp" k8s.io/kubernetes/cmd/kube-scheduler >&2
mv "$dir/kube-apiserver.tmp" "$dir/kube-apiserver"
mv "$dir/kube-scheduler.tmp" "$dir/kube-scheduler"
echo "$dir"
