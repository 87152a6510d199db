"""A gateway shard (``agentr1.gateway.GatewayShards``) is a whole gateway on the shared engine: it answers a session's
chat call through the real OpenAI client and stores the step; and when the process that started it is killed, the
shard and the engine process stop too (no orphan gateway left serving nothing)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from agentr1.store import TraceStore

pytestmark = pytest.mark.slow  # three processes importing torch


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in state  # a zombie: it has exited (its new parent has not reaped it)


@pytest.mark.timeout(300)
def test_a_shard_serves_a_session_and_stops_when_its_starter_is_killed(tmp_path, tiny_model_path):
    db = f"sqlite:///{tmp_path / 'traces.db'}"
    owner = subprocess.Popen([sys.executable, str(Path(__file__).with_name("shard_owner.py")), str(tiny_model_path),
                              db], stdout=subprocess.PIPE, text=True)
    try:
        shard_pid, engine_pid, url = owner.stdout.readline().split()
        opened = httpx.post(f"{url}/sessions", json={"task_id": "t"}, timeout=30).json()
        client = OpenAI(base_url=opened["base_url"], api_key=opened["api_key"])
        reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=8, logprobs=True)
        assert reply.choices[0].logprobs.content and opened["base_url"].startswith(url)
        with TraceStore.open(db) as store:
            (step,) = store.get_session(opened["id"]).steps
        assert step.action_ids and len(step.action_logprobs) == len(step.action_ids)
    finally:
        owner.kill()
        owner.wait(30)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (gone(int(shard_pid)) and gone(int(engine_pid))):
        time.sleep(0.2)
    assert gone(int(shard_pid)) and gone(int(engine_pid))
