"""The vllm.general_plugins entry point: the package declares it, it loads
without vLLM, it registers Kvp2pTier as "kvp2p" with vLLM's
SecondaryTierFactory, and vLLM's factory then builds the tier from
{"type": "kvp2p", ...} with no module_path: in this process, and from the
built wheel installed apart from the source tree, through vLLM's own plugin
loader."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from kvp2p.testing import Sidecar

PYTHON_DIR = Path(__file__).resolve().parent.parent  # python/: pyproject.toml
HAVE_VLLM = os.environ.get("KVP2P_VLLM") != "0" and importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed here, or KVP2P_VLLM=0")


def _pyproject() -> dict:  # type: ignore[type-arg]
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(PYTHON_DIR / "pyproject.toml", "rb") as f:
        return tomllib.load(f)  # type: ignore[no-any-return]


def test_entry_point_declared() -> None:
    project = _pyproject()["project"]
    assert project["entry-points"]["vllm.general_plugins"] == {"kvp2p": "kvp2p.plugin:register"}
    assert {"vllm", "test"} <= set(project["optional-dependencies"])
    assert "version" in project.get("dynamic", []), "the version comes from kvp2p.__version__"


def test_plugin_imports_without_vllm() -> None:
    """vLLM's loader imports the entry point in every process, and `pip`
    tools list it where vLLM is absent: the module must not need vLLM."""
    code = ("import sys, kvp2p.plugin as p; assert callable(p.register); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'vllm'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=PYTHON_DIR, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"kvp2p.plugin imported vLLM modules: {out.stdout}"


@needs_vllm
def test_register_names_the_tier() -> None:
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    from kvp2p import plugin
    from kvp2p.vllm import Kvp2pTier

    plugin.register()
    plugin.register()  # vLLM may load general plugins again: no error
    assert SecondaryTierFactory.get_tier_class({"type": "kvp2p"}) is Kvp2pTier
    # The spelling of earlier configs still works.
    assert SecondaryTierFactory.get_tier_class({"type": "Kvp2pTier", "module_path": "kvp2p.vllm"}) is Kvp2pTier


@needs_vllm
def test_factory_builds_the_tier_by_name(sidecars: Callable[..., Sidecar]) -> None:
    """vLLM's own construction path (OffloadingSpecFactory ->
    TieringOffloadingSpec.get_manager -> SecondaryTierFactory) from
    {"type": "kvp2p", "socket": ...}: the tier is ours and attaches to a
    real sidecar."""
    from kvp2p.testing.vllm_harness import build_manager
    from kvp2p.vllm import Kvp2pTier

    sc = sidecars(f"kvp2p-plugin-{os.getpid()}", 64, 4096, region_dir="/dev/shm")
    spec, mgr = build_manager(sc.name, sc.socket, 64, 4096, {"type": "kvp2p", "attach_timeout_s": 30})
    try:
        cfg = spec.extra_config["secondary_tiers"][0]
        assert cfg["type"] == "kvp2p" and "module_path" not in cfg
        (tier,) = mgr.secondary_tiers
        assert type(tier) is Kvp2pTier
        assert tier.tier_type == "kvp2p"
        assert tier.core.client.registration >= 1, f"not attached to the sidecar: {sc.log()}"
    finally:
        mgr.shutdown()
        if os.path.exists(sc.region_path):
            os.unlink(sc.region_path)


@needs_vllm
def test_installed_wheel_registers_through_vllm(tmp_path: Path) -> None:
    """The wheel, installed into a directory of its own (not the source
    tree), is found by vLLM's load_general_plugins through its entry point,
    and {"type": "kvp2p"} then resolves to the installed Kvp2pTier."""
    dist, site = tmp_path / "dist", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    # --no-build-isolation: the environment's setuptools, no index needed.
    build = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(PYTHON_DIR)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    (wheel,) = dist.glob("kvp2p-*.whl")
    inst = subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert inst.returncode == 0, inst.stderr
    code = textwrap.dedent("""
        import kvp2p
        from vllm.plugins import load_general_plugins
        from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
        load_general_plugins()
        cls = SecondaryTierFactory.get_tier_class({"type": "kvp2p"})
        print(kvp2p.__file__)
        print(cls.__module__ + "." + cls.__name__)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VLLM_PLUGINS")}
    env["PYTHONPATH"] = str(site)
    # cwd: the temporary directory, so that the source tree is not on the path.
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    where, cls = run.stdout.split()[-2:]
    assert Path(where).is_relative_to(site), f"kvp2p imported from {where}, not the installed wheel"
    assert cls == "kvp2p.vllm.Kvp2pTier"
