#!/usr/bin/env bash
# The Python side's tests: sets up the project's virtual environment
# (scripts/pyenv.sh; with vLLM unless KVP2P_VLLM=0), builds the kvp2p
# binary the tests run as sidecars, and runs pytest on python/tests.
# With KVP2P_VLLM=0 the vLLM tests skip and say why.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${KVP2P_VLLM:-1}" = 0 ]; then
  py=$(scripts/pyenv.sh)
else
  py=$(scripts/pyenv.sh --vllm)
fi
go build -o kvp2p ./cmd/kvp2p
export KVP2P_BIN="$PWD/kvp2p"
set +e
(cd python && "$py" -m pytest -q -rs tests "$@")
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "test-python: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
