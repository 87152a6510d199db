"""Connections that survive load: 64 agents, each a real ``openai.AsyncOpenAI`` client with its own
connection pool (idle connections kept 5 s, retries off), drive a real `agentr1 gateway` process
(``--backend vllm`` in front of bench/instant_vllm.py, durable SQLite) for a minute. Between
calls an agent thinks briefly, or pauses about 5 s (a tool running): exactly the idle time at
which a pooled connection used to be closed by the gateway while the client reused it
(``httpx.ReadError``; with ``AGENTR1_KEEP_ALIVE_S=5``, uvicorn's default, this test sees such
errors: 8 in 734 calls in one minute when measured). No transport error is allowed, and every
answered call must be a stored step of its session."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from openai import APIConnectionError, AsyncOpenAI

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from agentr1.gateway.server import free_port  # noqa: E402
from peers import start_process, wait_ready  # noqa: E402

AGENTS = 64
DURATION_S = 60.0  # keep-alive errors showed up within one minute (8 in 734 calls) when the gateway had them
CALLS_PER_SESSION = 8  # then the agent starts a new session (bounded histories)


async def agent(index: int, url: str, deadline: float, rng: random.Random) -> tuple[dict[str, int], list[str], int]:
    """Sessions of up to CALLS_PER_SESSION calls until ``deadline``: {session id: calls answered},
    the errors, and how many were transport errors."""
    answered: dict[str, int] = {}
    errors: list[str] = []
    transport = 0
    async with httpx.AsyncClient(timeout=60) as http:
        while time.monotonic() < deadline:
            created = (await http.post(f"{url}/sessions", json={"task_id": f"pooled-{index}"})).json()
            answered[created["id"]] = 0
            # generous timeouts: on a shared 2-core machine this process's own event loop can lag for
            # seconds, and a 5 s connect timeout then fires in the client after the kernel had connected
            client = AsyncOpenAI(base_url=created["base_url"], api_key="none", max_retries=0,
                                 timeout=openai.Timeout(120.0, connect=60.0))  # (openai 3.x: httpx2's type)
            messages: list[dict[str, str]] = []
            for call in range(CALLS_PER_SESSION):
                if time.monotonic() >= deadline:
                    break
                messages.append({"role": "user", "content": f"agent {index} call {call}: what is 2+2?"})
                try:
                    reply = await client.chat.completions.create(model="policy", messages=messages,  # type: ignore[arg-type]
                                                                 max_tokens=16)
                except APIConnectionError as exc:  # also APITimeoutError
                    transport += 1
                    errors.append(f"agent {index}: {type(exc).__name__} from {exc.__cause__!r}")
                    break
                except Exception as exc:  # any other failure is an error too
                    errors.append(f"agent {index}: {type(exc).__name__}: {exc}")
                    break
                answered[created["id"]] += 1
                messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
                # a tool call of ~5 s (idle connection at the keep-alive edge) or a short think
                await asyncio.sleep(rng.uniform(4.9, 5.1) if rng.random() < 0.4 else rng.uniform(0.0, 0.5))
            await client.close()
    return answered, errors, transport


async def drive(url: str) -> list[tuple[dict[str, int], list[str], int]]:
    deadline = time.monotonic() + DURATION_S
    return await asyncio.gather(*(agent(i, url, deadline, random.Random(i)) for i in range(AGENTS)))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_64_pooled_openai_clients_see_no_transport_error_and_every_answer_is_stored(tmp_path, smollm2_path):
    from agentr1.store import TraceStore

    procs: list[subprocess.Popen] = []
    try:
        backend_port, port = free_port(), free_port()
        backend = start_process([sys.executable, str(ROOT / "bench" / "instant_vllm.py"), "--port", str(backend_port),
                                 "--model-dir", str(smollm2_path)], cwd=tmp_path, log=tmp_path / "backend.log")
        procs.append(backend)
        wait_ready(f"http://127.0.0.1:{backend_port}/health", backend)
        db = f"sqlite:///{tmp_path / 'pooled.db'}"
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # AGENTR1_KEEP_ALIVE_S=5 in the environment: the test fails
        gateway = subprocess.Popen(
            [str(Path(sys.executable).parent / "agentr1"), "gateway", "--backend", "vllm", "--backend-url",
             f"http://127.0.0.1:{backend_port}", "--model", str(smollm2_path), "--db", db, "--port", str(port),
             "--accept-any-model", "--log-level", "warning"],
            cwd=tmp_path, env=env, stdout=(tmp_path / "gateway.log").open("wb"), stderr=subprocess.STDOUT)
        procs.append(gateway)
        url = f"http://127.0.0.1:{port}"
        wait_ready(f"{url}/ready", gateway)

        results = asyncio.run(drive(url))
        answered = {sid: n for per_agent, _, _ in results for sid, n in per_agent.items()}
        errors = [e for _, errs, _ in results for e in errs]
        transport = sum(t for _, _, t in results)
        assert transport == 0 and not errors, (transport, errors[:5])
        total = sum(answered.values())
        assert total > AGENTS * 6, f"only {total} calls answered: the load did not run"

        with TraceStore.open(db, migrate=False) as store:
            stored = {sid: len(store.get_session(sid).steps) for sid in answered}
            store.engine.dispose()
        assert stored == answered  # durable writes: an answered call is a committed step
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=60)
