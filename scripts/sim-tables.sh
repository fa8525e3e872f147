#!/usr/bin/env bash
# Regenerates the simulator's tables in docs/evaluation.md from the commands shown
# next to them: each block between "<!-- sim: ARGS -->" and "<!-- /sim -->"
# is replaced by the output of `kvp2p sim ARGS`, in a code fence. Nothing
# in those blocks is written by hand (cmd/kvp2p's TestDocsSimTables checks
# them).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)/kvp2p
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/kvp2p
python3 - "$bin" <<'PY'
import re, subprocess, sys
bin = sys.argv[1]
src = open("docs/evaluation.md").read()
def run(m):
    args = m.group(1).split()
    out = subprocess.run([bin, "sim", *args], check=True, capture_output=True, text=True).stdout
    return f"<!-- sim: {m.group(1)} -->\n```\n{out}```\n<!-- /sim -->"
new = re.sub(r"<!-- sim: (.*?) -->\n.*?<!-- /sim -->", run, src, flags=re.S)
open("docs/evaluation.md", "w").write(new)
PY
echo "docs/evaluation.md: simulator tables regenerated"
