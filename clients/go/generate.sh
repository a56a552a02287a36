#!/usr/bin/env sh
# Generates gen/go/groupcoord/v1/*.pb.go (the repository's gen/go module, committed: a module
# others `go get`) from proto/groupcoord/v1/*.proto (run by `go generate ./...` here, after
# editing a .proto; tests/unit/test_go_stubs.py fails when the committed files differ from a
# fresh run). Usage: generate.sh [OUTPUT_DIR] (default: the repository's gen/go).
# The plugins are this module's pinned tools (go.mod: protoc-gen-go, protoc-gen-go-grpc);
# protoc is $PROTOC, else `protoc` on PATH, else the one grpcio-tools ships in the
# repository's .venv (scripts/setup installs it).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$(mkdir -p "${1:-$root/gen/go}" && cd "${1:-$root/gen/go}" && pwd)
bin="$root/.cache/clients/go/bin"
mkdir -p "$bin"
(cd "$here" && go build -o "$bin/" \
  google.golang.org/protobuf/cmd/protoc-gen-go \
  google.golang.org/grpc/cmd/protoc-gen-go-grpc)

if [ -n "${PROTOC:-}" ]; then
  protoc=$PROTOC
elif command -v protoc >/dev/null 2>&1; then
  protoc=protoc
elif [ -x "$root/.venv/bin/python" ] && "$root/.venv/bin/python" -c 'import grpc_tools' 2>/dev/null; then
  protoc="$root/.venv/bin/python -m grpc_tools.protoc"
else
  # (the words of every optional feature's message: services/extras.py)
  echo "generate.sh: error: clients/go/generate.sh needs grpcio-tools: run scripts/setup protos" \
    "(in a checkout), or set PROTOC or put protoc on PATH" >&2
  exit 1
fi

rm -rf "$out/groupcoord"
cd "$root/proto"
# module= strips the module path from go_package, so the files land in gen/go/groupcoord/v1,
# the directory of their import path inside the gen/go module.
$protoc -I. \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --go_out="$out" --go_opt=module=github.com/groupcoord/groupcoord/gen/go \
  --go-grpc_out="$out" --go-grpc_opt=module=github.com/groupcoord/groupcoord/gen/go \
  groupcoord/v1/*.proto
