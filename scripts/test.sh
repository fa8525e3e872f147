#!/usr/bin/env bash
# All of kvp2p's tests, from a fresh machine: the README's test command and
# what CI (.ci/run) runs. It installs what it needs itself (Go modules; the
# Python virtual environment and, unless KVP2P_VLLM=0, vLLM from PyPI).
#
#   scripts/test.sh              # everything
#   KVP2P_PYTHON=0 scripts/test.sh   # Go only
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
go version
go mod download
go vet ./...
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi
go test -race -count=1 ./...
if [ -x scripts/fuzz-ci.sh ]; then FUZZTIME="${FUZZTIME:-5s}" scripts/fuzz-ci.sh; fi
if [ "${KVP2P_PYTHON:-1}" != 0 ] && [ -x scripts/test-python.sh ]; then scripts/test-python.sh; fi
echo "all tests passed"
