#!/bin/sh
# Runs every fuzz target of the module for a bounded time each (CI).
#
#   FUZZTIME           time per target (default 30s; e.g. 5s for a smoke run)
#   FUZZMINIMIZETIME   time to minimise a new interesting input (default 5s:
#                      Go's 60s default stalls short runs)
#   FUZZPARALLEL       fuzz workers per target (default: GOMAXPROCS)
#   FUZZPKGS           packages to search (default ./...)
#
# Targets are found with `go test -list '^Fuzz'`, so a new one runs without
# editing this file. A failing input is saved under the package's
# testdata/fuzz/<Target>/ (commit it: it becomes a regression seed); the
# script goes on with the other targets and exits 1 at the end.
set -eu
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-30s}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-5s}
par=""
if [ -n "${FUZZPARALLEL:-}" ]; then
	par="-parallel=$FUZZPARALLEL"
fi
failed=""
n=0
for pkg in $(go list ${FUZZPKGS:-./...}); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		n=$((n + 1))
		echo "== $pkg $target ($FUZZTIME)"
		# shellcheck disable=SC2086 # $par is one flag or nothing
		if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" \
			-fuzzminimizetime "$FUZZMINIMIZETIME" $par "$pkg"; then
			failed="$failed $pkg.$target"
		fi
	done
done
if [ -n "$failed" ]; then
	echo "fuzz-ci: FAILED:$failed (inputs under testdata/fuzz/)" >&2
	exit 1
fi
echo "fuzz-ci: $n targets passed, $FUZZTIME each"
