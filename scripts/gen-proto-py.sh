#!/usr/bin/env bash
# Regenerates the engine API's Python code (python/kvp2p/_pb/) from
# proto/kvp2p/engine/v1/engine.proto with grpcio-tools from the project's
# virtual environment (scripts/pyenv.sh installs it). Called by
# scripts/gen-proto.sh; the generated files are committed.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(scripts/pyenv.sh)
out=python/kvp2p/_pb
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m grpc_tools.protoc -I proto --python_out="$tmp" --pyi_out="$tmp" \
  --grpc_python_out="$tmp" proto/kvp2p/engine/v1/engine.proto
mkdir -p "$out"
src="$tmp/kvp2p/engine/v1"
cp "$src/engine_pb2.py" "$src/engine_pb2.pyi" "$out/"
# protoc writes an absolute import of the proto's package path; the package
# lives inside kvp2p._pb, so make it relative.
sed 's/^from kvp2p\.engine\.v1 import engine_pb2 as/from . import engine_pb2 as/' \
  "$src/engine_pb2_grpc.py" >"$out/engine_pb2_grpc.py"
grep -q '^from \. import engine_pb2 as' "$out/engine_pb2_grpc.py" || {
  echo "gen-proto-py: the import fix did not apply" >&2
  exit 1
}
cat >"$out/__init__.py" <<'PY'
"""Generated gRPC code of the engine API (scripts/gen-proto-py.sh). Do not edit."""
PY
echo "generated: $out"
