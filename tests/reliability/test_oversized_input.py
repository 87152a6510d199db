"""Oversized input is refused early, with a clear error and bounded memory, in a real gateway process:
a body over the limit streamed without Content-Length (the declared-length case is in
tests/gateway/test_gateway_api.py) and a prompt far over the model's context."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from gateway_server import start_server

MIB = 1024 * 1024


def chunked_body(mib: int):  # type: ignore[no-untyped-def]
    """A chat request of ``mib`` MiB, sent in chunks (no Content-Length: the limit cannot be seen up front)."""
    yield b'{"model": "m", "messages": [{"role": "user", "content": "'
    for _ in range(mib):
        yield b"x" * MIB
    yield b'"}]}'


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_oversized_bodies_and_prompts_are_refused_early_with_bounded_memory(tmp_path):
    with start_server(kind="instant", model="tiny", db=f"sqlite:///{tmp_path / 'big.db'}") as server:
        gateway = psutil.Process(server.pid)
        rss_before = gateway.memory_info().rss
        started = time.monotonic()
        r = httpx.post(f"{server.url}/v1/chat/completions", content=chunked_body(64), timeout=60,
                       headers={"content-type": "application/json"})
        assert r.status_code == 413, r.text
        assert r.json()["error"]["code"] == "request_too_large" and "larger than" in r.json()["error"]["message"]
        assert time.monotonic() - started < 10
        assert gateway.memory_info().rss - rss_before < 32 * MIB  # it stopped reading at the limit (8 MiB)

        prompt = "word " * 400_000  # 2 MiB of text: ~400k tokens against a context of 8192
        r = httpx.post(f"{server.url}/v1/chat/completions", timeout=120,
                       json={"model": "m", "messages": [{"role": "user", "content": prompt}]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
        assert "maximum context length" in r.json()["error"]["message"]
        assert gateway.memory_info().rss - rss_before < 256 * MIB
        ok = httpx.post(f"{server.url}/v1/chat/completions", json={"model": "m", "messages": [
            {"role": "user", "content": "still there?"}]}, timeout=60)
        assert ok.status_code == 200  # and it serves on
