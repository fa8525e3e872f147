"""vLLM's general plugin of kvp2p: registers the tier under the name "kvp2p".

pyproject.toml declares `register` as a `vllm.general_plugins` entry point,
which vLLM calls in every process it starts (API server, engine core,
workers) before it reads its config. With the package installed, a tier
config of {"type": "kvp2p", "socket": ...} then finds kvp2p.vllm.Kvp2pTier
without "module_path", as vLLM's own tiers do. The older spelling
{"type": "Kvp2pTier", "module_path": "kvp2p.vllm"} keeps working.

This module imports nothing of vLLM at import time: the entry point can be
loaded (and listed) where vLLM is absent.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

TIER_TYPE = "kvp2p"
TIER_MODULE = "kvp2p.vllm"
TIER_CLASS = "Kvp2pTier"


def register() -> None:
    """Registers Kvp2pTier with vLLM's SecondaryTierFactory as "kvp2p".

    Idempotent: vLLM may call general plugins more than once per process,
    and a second registration of a name raises in the factory. The tier's
    module is imported only when a config names the tier (the factory's
    loader is lazy), so engines that do not use kvp2p pay nothing for it.
    """
    try:
        from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
    except ImportError as e:
        # A vLLM without the tiering factory (before 0.32) cannot load the
        # tier either way; raising here would stop vLLM's start for a plugin
        # nobody may have asked for.
        log.warning("kvp2p: this vLLM has no secondary-tier factory (%s); the kvp2p tier is not registered", e)
        return
    try:
        SecondaryTierFactory.register_tier(TIER_TYPE, TIER_MODULE, TIER_CLASS)
    except ValueError:
        # Already registered, by an earlier call in this process (tests and
        # harnesses call this besides vLLM's loader). The factory does not
        # say by whom; a name taken by another package would show at the
        # tier's construction as another class than Kvp2pTier.
        log.debug("kvp2p: tier type %r already registered", TIER_TYPE)
