"""The `agentr1` command's model commands run on jemalloc where the system has it (agentr1.core.allocator):
checked on a real `agentr1 gateway` process started from the installed console script, as a user starts it, with
and without AGENTR1_MALLOC=glibc. Where the system has no jemalloc the same test checks the gateway still serves
on glibc."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from agentr1.core.allocator import JEMALLOC_CONF, jemalloc_library

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and LD_PRELOAD are Linux's")


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve_and_inspect(model: Path, db: Path, **env: str) -> dict[str, object]:
    """Start `agentr1 gateway` on ``model``, answer one chat call through it, and return what its process runs on:
    the libraries mapped (jemalloc or not) and its MALLOC_CONF; the process is ended before returning."""
    port = _port()
    command = [str(Path(sys.executable).parent / "agentr1"), "gateway", "--model", str(model), "--port", str(port),
               "--db", f"sqlite:///{db}", "--accept-any-model"]
    clean = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MALLOC_CONF", "AGENTR1_MALLOC",
                                                              "AGENTR1_MALLOC_PRELOADED")}
    gateway = subprocess.Popen(command, env={**clean, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while gateway.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert gateway.poll() is None, gateway.stdout.read().decode() if gateway.stdout else ""
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x")
        answer = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=2, temperature=0)
        maps = Path(f"/proc/{gateway.pid}/maps").read_text()  # same pid: the re-execution replaces the image
        environ = Path(f"/proc/{gateway.pid}/environ").read_bytes().split(b"\0")
        conf = next((e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"MALLOC_CONF=")), None)
        return {"jemalloc": "libjemalloc" in maps, "conf": conf, "tokens": answer.usage.completion_tokens}
    finally:
        gateway.terminate()
        gateway.wait(timeout=60)


def test_model_commands_run_on_jemalloc_where_the_system_has_it(tiny_model_path, tmp_path):
    default = _serve_and_inspect(tiny_model_path, tmp_path / "a.db")
    have = jemalloc_library() is not None
    assert default == {"jemalloc": have, "conf": JEMALLOC_CONF if have else None, "tokens": 2}
    opted_out = _serve_and_inspect(tiny_model_path, tmp_path / "b.db", AGENTR1_MALLOC="glibc")
    assert opted_out == {"jemalloc": False, "conf": None, "tokens": 2}
    if have:  # the user's own jemalloc options win
        mine = _serve_and_inspect(tiny_model_path, tmp_path / "c.db", MALLOC_CONF="narenas:2")
        assert mine == {"jemalloc": True, "conf": "narenas:2", "tokens": 2}
