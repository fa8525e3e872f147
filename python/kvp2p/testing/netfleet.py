"""kvp2p.testing.fleet's two-tier fleet on hosts that are network
namespaces (kvp2p.testing.netns), so that network faults are the
kernel's: source pod A of two ranks (A0, A1: two engines, and with kvp2p
their two sidecars, in one namespace, one host and one failure domain) and
consumer pod B. Three engines at one thread each: what two cores and 24 GiB
hold beside a build.

Both ranks of pod A are one failure domain the way an operator sets it:
each sidecar's `--failure-domain` is its pod's name (a pod UID in
Kubernetes, from the downward API), and the requests name it as
`remote_domain` beside `remote_host`/`remote_port`. vLLM's tier has no
failure domain and reads neither (the same kv_transfer_params go to both
tiers). Nothing else is set: both tiers at their shipped defaults; vLLM's
tier binds its ZMQ socket to the rank's host address (its `host`), as
between hosts it must.

Each rank has a cgroup of its own (netns.Lab.cgroup), which its engine's
processes and its sidecar join before they open a socket: a blackhole of
the rank drops exactly its sockets, whatever their ports.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from kvp2p.testing.fleet import Peer, Tier
from kvp2p.testing.netns import Host, Lab, enter
from kvp2p.testing.real_engine import EngineConfig
from kvp2p.testing.sidecar import Sidecar

# Three engines starting at once beside other jobs on two cores took over
# the single engine's 600 s at load average 50.
START_TIMEOUT_S = 1500.0


@dataclass
class NetPeer(Peer):
    """A Peer on a lab host, in a cgroup of its own, in a failure domain."""

    host: Host | None = None
    cgroup: str = ""
    domain: str = ""
    run_nice: int = 0  # the engine's niceness once ready (EngineConfig.nice)

    @property
    def h(self) -> Host:
        assert self.host is not None
        return self.host

    def config(self) -> EngineConfig:
        cfg = super().config()
        if self.tier == "vllm":
            cfg.secondary_tiers = [{"type": "p2p", "host": self.h.addr, "port": self.port}]
        cfg.netns, cfg.cgroup = self.h.path, self.cgroup
        # Started at the test's own priority, reniced once ready (ready()):
        # at nice 10 three engines took over 10 minutes to start beside
        # the other jobs of a shared 2-core machine.
        self.run_nice, cfg.nice = cfg.nice, 0
        return cfg

    def ready(self, timeout: float = START_TIMEOUT_S) -> "NetPeer":
        self.e.ready(timeout)
        os.setpriority(os.PRIO_PGRP, self.e.proc.pid, self.run_nice)  # the engine's whole process group
        return self

    def spawn(self) -> "NetPeer":
        if self.tier == "kvp2p" and self.sidecar is None:
            path, cg = self.h.path, self.cgroup
            self.sidecar = Sidecar(self.name, 1, 1, region_dir="/dev/shm", port=self.port, host=self.h.addr,
                                   preexec=lambda: enter(path, cg), extra=["--failure-domain", self.domain])
        super().spawn()
        return self


@dataclass
class NetFleet:
    """Pod A (ranks a = A0 and a1 = A1) and pod B on one tier, on a Lab of
    hosts "a" and "b". Fleet's interface for A0 (a, b, kv_id, source,
    restart_a), so h2h.Run's scenarios run on it too."""

    tier: Tier
    lab: Lab
    a: NetPeer
    a1: NetPeer
    b: NetPeer
    serial: int = 0

    @classmethod
    def start(cls, tier: Tier, model: str, tag: str, env: dict[str, str] | None = None) -> "NetFleet":
        kw = {} if env is None else {"env": env}
        lab = Lab(["a", "b"])
        try:
            a = lab.host("a")
            peers = [NetPeer(f"{tag}-{tier}-{n}", tier, model, host=h, cgroup=lab.cgroup(n.lower()), domain=d, **kw)
                     for n, h, d in (("A0", a, "pod-a"), ("A1", a, "pod-a"), ("B", lab.host("b"), "pod-b"))]
        except BaseException:
            lab.close()
            raise
        f = cls(tier, lab, *peers)
        try:
            for p in peers:
                p.spawn()
            for p in peers:
                p.ready()
        except BaseException:
            f.close()
            raise
        return f

    @property
    def peers(self) -> tuple[NetPeer, NetPeer, NetPeer]:
        return self.a, self.a1, self.b

    def kv_id(self, what: str) -> str:
        self.serial += 1
        return f"{what}-{self.serial}"

    def source(self, role: str, kv_id: str, peer: NetPeer | None = None) -> dict[str, Any]:
        """kv_transfer_params naming peer (default A0) as B's source; the
        same keys for both tiers."""
        p = peer or self.a
        return {role: {"remote_host": p.h.addr, "remote_port": p.port, "kv_request_id": kv_id,
                       "remote_domain": p.domain}}

    def restart(self, p: NetPeer) -> None:
        """The rank again on the same port, as a rescheduled pod's would be."""
        p.engine = None
        p.spawn().ready()

    def restart_a(self) -> None:
        self.restart(self.a)

    def close(self) -> None:
        try:
            for p in self.peers:
                p.close()
        finally:
            self.lab.close()
