#!/usr/bin/env bash
# Creates (or reuses) the project's Python virtual environment at .venv and
# installs what the engine API's Python side needs: grpcio, protobuf and
# pytest, plus the kvp2p package itself (editable). With --vllm it also
# installs vLLM (CPU import is enough for the scheduler-side tests; the
# install is several GB and takes minutes, so it is opt-in).
# Prints the venv's python on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv="$root/.venv"
want_vllm=0
for a in "$@"; do
  case "$a" in
    --vllm) want_vllm=1 ;;
    *) echo "usage: $0 [--vllm]" >&2; exit 2 ;;
  esac
done
py=${PYTHON:-python3}
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip="$venv/bin/pip"
# Pins: grpcio-tools 1.85.1 generates code for protobuf 7.x; grpcio must be
# at least the tools' version (the generated stubs check it at import).
base=(grpcio==1.85.3 grpcio-tools==1.85.1 protobuf==7.36.2 numpy pytest)
stamp="$venv/.kvp2p-base"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${base[*]}" ]; then
  "$pip" install -q "${base[@]}" >&2
  echo "${base[*]}" >"$stamp"
fi
if [ ! -f "$venv/.kvp2p-pkg" ]; then
  "$pip" install -q --no-deps -e python >&2
  touch "$venv/.kvp2p-pkg"
fi
if [ "$want_vllm" = 1 ] && ! "$venv/bin/python" -c 'import vllm' 2>/dev/null; then
  # vLLM pins its own protobuf/grpcio ranges; reinstall ours afterwards so
  # the generated code keeps the runtime it was generated for.
  "$pip" install -q vllm==0.33.0 >&2
  "$pip" install -q "${base[@]}" >&2
fi
echo "$venv/bin/python"
