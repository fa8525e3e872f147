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
#
# Go 1.26's fuzz coordinator can fail a run with a bare "context deadline
# exceeded" when -fuzztime expires while a starved worker is mid-call
# (golang/go#75804, fixed in Go 1.27). Such a run wrote no input and found
# nothing; the script runs that target once more and fails only if the second
# run fails too, or if any run wrote a new input.
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
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# corpus_count PKG TARGET: files in the target's corpus directory.
corpus_count() {
	dir="$(go list -f '{{.Dir}}' "$1")/testdata/fuzz/$2"
	if [ -d "$dir" ]; then ls "$dir" | wc -l; else echo 0; fi
}

# fuzz_one PKG TARGET: one bounded run; its output goes to the terminal and $log.
fuzz_one() {
	before=$(corpus_count "$1" "$2")
	# shellcheck disable=SC2086 # $par is one flag or nothing
	go test -run '^$' -fuzz "^${2}\$" -fuzztime "$FUZZTIME" \
		-fuzzminimizetime "$FUZZMINIMIZETIME" $par "$1" >"$log" 2>&1
	rc=$?
	cat "$log"
	return $rc
}

# deadline_flake PKG TARGET: the last run failed only with the coordinator's
# deadline error and wrote no input.
deadline_flake() {
	[ "$(corpus_count "$1" "$2")" = "$before" ] || return 1
	grep -q '^    context deadline exceeded$' "$log" || return 1
	! grep -q -E 'Failing input written|panic:|--- FAIL: .*\n.*Error' "$log"
}
for pkg in $(go list ${FUZZPKGS:-./...}); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		n=$((n + 1))
		echo "== $pkg $target ($FUZZTIME)"
		if ! fuzz_one "$pkg" "$target"; then
			if deadline_flake "$pkg" "$target"; then
				echo "fuzz-ci: $pkg $target: coordinator deadline race (golang/go#75804), no input written: running it again"
				fuzz_one "$pkg" "$target" || failed="$failed $pkg.$target"
			else
				failed="$failed $pkg.$target"
			fi
		fi
	done
done
if [ -n "$failed" ]; then
	echo "fuzz-ci: FAILED:$failed (inputs under testdata/fuzz/)" >&2
	exit 1
fi
echo "fuzz-ci: $n targets passed, $FUZZTIME each"
