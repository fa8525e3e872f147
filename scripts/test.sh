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
# The fault lab's test (go test -tags lab ./internal/lab, below) needs root
# with ip netns, nft, tc and ss. Install them if we can.
if [ "$(id -u)" = 0 ] && ! command -v nft >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  apt-get install -y nftables iproute2 >/dev/null 2>&1 || (apt-get update >/dev/null 2>&1 && apt-get install -y nftables iproute2 >/dev/null 2>&1) || echo "nftables not installed: the lab test will skip"
fi
go mod download
go vet ./...
# Imports grouped the Go way (standard library, a blank line, the rest) and
# the shared test helpers (internal/nodetest) imported by tests only.
go run ./tools/srccheck
# The library's caller: a program that embeds it, built and run (two nodes
# on loopback, about a second).
go run ./examples/embed
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi
# The status page's test drives a headless Chromium; install it where we
# can (root, Debian), and then require it, so that the test cannot skip.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get install -y -q chromium >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
fi
if command -v chromium >/dev/null 2>&1; then export KVP2P_REQUIRE_CHROMIUM=1; fi
go test -race -count=1 ./...
# Content checks that skip under -race: docs/evaluation.md's simulator
# tables are what scripts/sim-tables.sh prints now.
go test -count=1 -run 'TestDocsSimTables' ./cmd/kvp2p
# The fault lab: five scenarios on real processes in network namespaces,
# faults made by the kernel (about 5 minutes). Only as root with the tools.
lab_missing=""
for tool in ip nft tc ss; do command -v "$tool" >/dev/null 2>&1 || lab_missing="$lab_missing $tool"; done
if [ "$(id -u)" != 0 ]; then
  echo "fault lab test skipped: needs root (go test -tags lab ./internal/lab)"
elif [ -n "$lab_missing" ]; then
  echo "fault lab test skipped: missing$lab_missing (apt-get install -y iproute2 nftables)"
else
  go test -tags lab -count=1 -v -run TestLabScenarios ./internal/lab # -v: its tables, or why it skipped
fi
if [ -x scripts/fuzz-ci.sh ]; then FUZZTIME="${FUZZTIME:-5s}" scripts/fuzz-ci.sh; fi
if [ "${KVP2P_PYTHON:-1}" != 0 ] && [ -x scripts/test-python.sh ]; then scripts/test-python.sh; fi
echo "all tests passed"
