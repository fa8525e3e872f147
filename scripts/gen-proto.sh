#!/usr/bin/env bash
# Regenerates the engine API's Go code (internal/engineapi/enginepb) and,
# when scripts/gen-proto-py.sh exists, its Python code, from
# proto/kvp2p/engine/v1/engine.proto. Installs its own tools: protoc comes
# from grpcio-tools in the project's virtual environment, the Go plugins
# are built from the module proxy into .tools/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
tools="$root/.tools/bin"
mkdir -p "$tools"
[ -x "$tools/protoc-gen-go" ] || GOBIN="$tools" go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
[ -x "$tools/protoc-gen-go-grpc" ] || GOBIN="$tools" go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
venv="$root/.venv"
if [ -x scripts/pyenv.sh ]; then
  scripts/pyenv.sh >/dev/null
else
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q grpcio-tools==1.85.1
fi
PATH="$tools:$PATH" "$venv/bin/python" -m grpc_tools.protoc -I proto \
  --go_out=. --go_opt=module=github.com/kvp2p/kvp2p \
  --go-grpc_out=. --go-grpc_opt=module=github.com/kvp2p/kvp2p \
  proto/kvp2p/engine/v1/engine.proto
if [ -x scripts/gen-proto-py.sh ]; then scripts/gen-proto-py.sh; fi
echo "generated: internal/engineapi/enginepb"
