"""Test and demo helpers of kvp2p: real `kvp2p serve` sidecars on loopback
(sidecar), a fake engine (fake_engine), vLLM's scheduler side replayed on CPU
(vllm_harness, vllm_scheduler), real vLLM engines (real_engine, tiny_model)
and the two-engine demo (`python -m kvp2p.testing.demo`).

Not part of the wheel: pyproject.toml leaves this subpackage out, so an
installed kvp2p holds only what runs inside vLLM. It is importable from a
source checkout (`pip install -e python`, or `python/` on the path). It does
not look for the checkout: the kvp2p binary comes from $KVP2P_BIN or PATH.
"""

from kvp2p.testing.sidecar import Sidecar, free_port, kvp2p_binary

__all__ = ["Sidecar", "free_port", "kvp2p_binary"]
