"""Peer roles of a request, from vLLM's kv_transfer_params.

Parsed as vLLM's own P2P tier does (tiering/p2p/manager.py, _parse_source
and _parse_dest): the consumer role is remote_prefiller (PD decode side:
every lookup is a HIT at once) or, failing that, remote_kv_source
(symmetric: lookups are probed); it needs remote_host, remote_port and a
kv_request_id, or the request has no consumer role. remote_decoder (PD
prefill side) marks the request as producing for a decoder even when its
kv_request_id is missing; its stores then fail, as in vLLM. Its optional
remote_host and remote_port name the decoder (its kvp2p peer id): then only
that peer may fetch the blocks; without them the kv_request_id is the only
key to them (docs/security.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kvp2p._pb import engine_pb2 as pb


@dataclass(frozen=True, slots=True)
class Source:
    """This request loads from a peer."""

    kv_request_id: str
    host: str
    port: int
    domain: str
    pd: bool  # remote_prefiller: no probe, every key is a HIT


@dataclass(frozen=True, slots=True)
class Dest:
    """A decoder fetches this request's blocks (PD prefill side)."""

    kv_request_id: str | None
    host: str = ""  # the decoder, when named; only it may fetch
    port: int = 0


@dataclass(frozen=True, slots=True)
class Roles:
    source: Source | None
    dest: Dest | None

    @property
    def any(self) -> bool:
        return self.source is not None or self.dest is not None

    def to_pb(self) -> pb.TransferParams:
        p = pb.TransferParams()
        s = self.source
        if s is not None:
            r = p.remote_prefiller if s.pd else p.remote_kv_source
            r.host, r.port, r.domain, r.kv_request_id = s.host, s.port, s.domain, s.kv_request_id
        if self.dest is not None:
            d = p.remote_decoder
            d.kv_request_id = self.dest.kv_request_id or ""
            if self.dest.host and self.dest.port:
                d.host, d.port = self.dest.host, self.dest.port
        return p


NO_ROLES = Roles(None, None)


def _source(params: Mapping[str, Any]) -> Source | None:
    role = params.get("remote_prefiller")
    pd = True
    if role is None:
        role = params.get("remote_kv_source")
        pd = False
    if not role or not isinstance(role, Mapping):
        return None
    host, port, kv_id = role.get("remote_host"), role.get("remote_port"), role.get("kv_request_id")
    if not host or not port or not kv_id:
        return None
    try:
        port_n = int(port)
    except (TypeError, ValueError):
        return None
    if not 0 < port_n < 65536:
        return None
    return Source(str(kv_id), str(host), port_n, str(role.get("remote_domain") or ""), pd)


def _decoder(d: Any) -> tuple[str, int]:
    """The decoder remote_decoder names (remote_host, remote_port), if any."""
    if not isinstance(d, Mapping):
        return "", 0
    host, port = d.get("remote_host"), d.get("remote_port")
    if not host or not port:
        return "", 0
    try:
        port_n = int(port)
    except (TypeError, ValueError):
        return "", 0
    if not 0 < port_n < 65536:
        return "", 0
    return str(host), port_n


def parse(params: Mapping[str, Any] | None) -> Roles:
    """The roles named by a request's kv_transfer_params (None: none)."""
    if not params:
        return NO_ROLES
    src = _source(params)
    dest = None
    d = params.get("remote_decoder")
    if d is not None:
        kv_id = d.get("kv_request_id") if isinstance(d, Mapping) else None
        host, port = _decoder(d)
        dest = Dest(str(kv_id) if kv_id else None, host, port)
    if src is None and dest is None:
        return NO_ROLES
    return Roles(src, dest)
