#!/usr/bin/env bash
# Checks of the Python package as shipped (run by scripts/test-python.sh):
#
# 1. The committed gRPC/protobuf code (python/kvp2p/_pb) is what the
#    documented regeneration, scripts/gen-proto-py.sh, makes from
#    proto/kvp2p/engine/v1/engine.proto: regenerating changes nothing.
# 2. The wheel builds (pip wheel, an isolated PEP 517 build), holds only
#    what runs inside vLLM (no kvp2p.testing: sidecars, fakes, harnesses,
#    the demo), installs into a clean virtual environment WITHOUT vLLM, and
#    there kvp2p.client, kvp2p.tier and kvp2p.plugin import, the
#    vllm.general_plugins entry point is listed, kvp2p.__version__ is the
#    wheel's version, and kvp2p.vllm fails only for want of vLLM.
#
# Usage: scripts/check-python-package.sh [PYTHON]  (PYTHON: the project's
# virtual environment's python; default: scripts/pyenv.sh's). About 30-60 s
# with a warm pip cache (the clean environment installs grpcio, protobuf
# and numpy).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-$(scripts/pyenv.sh)}

# 1. Regeneration. A tree without git (an unpacked archive) cannot say what
# changed: say so rather than pass silently.
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check-python-package: not a git checkout: cannot check the generated code" >&2
  exit 1
fi
scripts/gen-proto-py.sh >/dev/null
if ! git diff --exit-code --stat -- python/kvp2p/_pb ||
  [ -n "$(git status --porcelain --untracked-files=all -- python/kvp2p/_pb)" ]; then
  git status --short -- python/kvp2p/_pb >&2
  echo "check-python-package: python/kvp2p/_pb is not what scripts/gen-proto-py.sh generates from proto/;" \
    "the regenerated files are in the tree now: review and commit them" >&2
  exit 1
fi
echo "check-python-package: generated code current (scripts/gen-proto-py.sh changes nothing)"

# 2. The wheel, in a clean environment.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$tmp/dist" ./python >&2
rm -rf python/build python/kvp2p.egg-info # the build's leftovers in the source tree
wheels=("$tmp"/dist/kvp2p-*.whl)
[ "${#wheels[@]}" = 1 ] && [ -f "${wheels[0]}" ] || {
  echo "check-python-package: expected one kvp2p wheel, got: ${wheels[*]}" >&2
  exit 1
}
wheel=${wheels[0]}
# The clean environment: the base interpreter of the project's venv (so the
# same Python version), without its site-packages.
base=$("$py" -c 'import sys; print(sys._base_executable)')
"$base" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --disable-pip-version-check "$wheel" >&2
(cd "$tmp" && "$tmp/venv/bin/python" - "$wheel" <<'PY')
import importlib
import importlib.metadata as md
import importlib.util
import os
import sys
import zipfile

wheel = sys.argv[1]
names = zipfile.ZipFile(wheel).namelist()
modules = sorted(n for n in names if n.endswith(".py"))
harness = [n for n in modules if n.startswith("kvp2p/testing/") or os.path.basename(n)[:-3] in (
    "testing", "fake_engine", "vllm_harness", "vllm_scheduler", "real_engine", "tiny_model", "demo")]
assert not harness, f"the wheel ships test harnesses: {harness}"
for want in ("kvp2p/client.py", "kvp2p/tier.py", "kvp2p/tierstate.py", "kvp2p/outbox.py", "kvp2p/lent.py",
             "kvp2p/vllm.py", "kvp2p/cpu_worker.py", "kvp2p/plugin.py",
             "kvp2p/_pb/engine_pb2.py", "kvp2p/_pb/engine_pb2_grpc.py"):
    assert want in names, f"the wheel lacks {want}"

assert importlib.util.find_spec("vllm") is None, "the clean environment has vLLM"
import kvp2p  # noqa: E402
import kvp2p.client  # noqa: E402,F401
import kvp2p.plugin  # noqa: E402,F401
import kvp2p.tier  # noqa: E402,F401

here = os.path.dirname(kvp2p.__file__)
assert here.startswith(sys.prefix), f"kvp2p imported from {here}, not the installed wheel"
assert kvp2p.__version__ == md.version("kvp2p"), (kvp2p.__version__, md.version("kvp2p"))
eps = [ep for ep in md.entry_points(group="vllm.general_plugins") if ep.name == "kvp2p"]
assert [ep.value for ep in eps] == ["kvp2p.plugin:register"], eps
assert callable(eps[0].load())
assert importlib.util.find_spec("kvp2p.testing") is None, "kvp2p.testing is installed"
try:
    importlib.import_module("kvp2p.vllm")
except ModuleNotFoundError as e:
    assert e.name == "vllm" or (e.name or "").startswith("vllm."), f"kvp2p.vllm needs {e.name}, not vLLM"
else:
    raise AssertionError("kvp2p.vllm imported without vLLM")
print(f"check-python-package: {os.path.basename(wheel)}: {len(modules)} modules, no harness; "
      "installed without vLLM: kvp2p.client, kvp2p.tier, kvp2p.plugin import")
PY
