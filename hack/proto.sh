#!/bin/sh
# proto.sh [OUTDIR]: regenerate the Go code of api/telemetry/v1 with protoc
# and the protoc-gen-go / protoc-gen-go-grpc versions pinned in go.mod's
# tool directives. OUTDIR defaults to the source tree (the checked-in code);
# the staleness test passes a temporary directory.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root}
command -v protoc >/dev/null || { echo "proto.sh: protoc not found: apt-get install protobuf-compiler" >&2; exit 1; }
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cd "$root"
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$bin/protoc-gen-go-grpc" google.golang.org/grpc/cmd/protoc-gen-go-grpc
protoc --plugin=protoc-gen-go="$bin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
	-I "$root" --go_out="$out" --go_opt=paths=source_relative \
	--go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
	api/telemetry/v1/telemetry.proto
