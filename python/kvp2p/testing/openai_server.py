"""`vllm serve` as users run it, for the end-to-end tests of the OpenAI API
and of `kvp2p proxy` (and kvp2p.testing.find_proxy): a process with its
own process group, /v1/completions, /metrics."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from kvp2p.testing.real_engine import EngineConfig, kv_transfer_config, own_group_below


class OpenAIServer:
    def __init__(self, cfg: EngineConfig, port: int, log_path: str) -> None:
        self.cfg = cfg
        self.port = port
        self.log_path = log_path
        ktc = kv_transfer_config(cfg)
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=str(cfg.kv_cache_gb))
        env.setdefault("PYTHONHASHSEED", "0")  # the fleet's block hashes
        if cfg.threads:
            env.update(OMP_NUM_THREADS=str(cfg.threads), VLLM_CPU_OMP_THREADS_BIND="nobind")
        # vllm-cpu 0.32's `vllm` command fails at start (it asks for the
        # version of a package named vllm; the CPU build's is vllm-cpu):
        # its OpenAI server module is what runs it there.
        args = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", cfg.model_dir, "--host", "127.0.0.1", "--port", str(port),
                "--dtype", cfg.dtype, "--block-size", str(cfg.block_size), "--enforce-eager",
                "--enable-prefix-caching", "--max-model-len", str(cfg.max_model_len), "--seed", "0",
                "--kv-transfer-config", json.dumps({
                    "kv_connector": ktc.kv_connector, "kv_role": ktc.kv_role, "engine_id": ktc.engine_id,
                    "kv_connector_extra_config": ktc.kv_connector_extra_config})]
        with open(log_path, "ab") as logf:
            # The engine's niceness (EngineConfig.nice): the sidecars get the
            # CPU first, as with a CPU of their own in a deployment.
            nice = cfg.nice
            self.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                         preexec_fn=lambda: own_group_below(nice))

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def ready(self, timeout: float = 600.0) -> "OpenAIServer":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited {self.proc.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(self.url("/health"), timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"vllm serve not healthy in {timeout}s: {self.log()}")

    def complete(self, prompt: list[int], max_tokens: int, kv_transfer_params: dict[str, Any] | None) -> dict:
        body: dict[str, Any] = {"model": self.cfg.model_dir, "prompt": prompt, "max_tokens": max_tokens,
                                "temperature": 0.0, "ignore_eos": True, "return_token_ids": True}
        if kv_transfer_params:
            body["kv_transfer_params"] = kv_transfer_params
        req = urllib.request.Request(self.url("/v1/completions"), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())

    def cached_by_source(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url("/metrics"), timeout=30) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for m in re.finditer(r'^vllm:prompt_tokens_cached_by_source_total\{([^}]*)\} (\S+)$', text, re.M):
            src = re.search(r'source="([^"]+)"', m.group(1))
            if src:
                out[src.group(1)] = out.get(src.group(1), 0.0) + float(m.group(2))
        return out

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
