"""What is durable when: with durable writes (the default) every answered call is a stored step,
even when the gateway process is killed with SIGKILL right after; a restarted gateway continues
the same sessions exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from agentr1.gateway.server import free_port
from agentr1.store import TraceStore

AGENTR1 = str(Path(sys.executable).parent / "agentr1")


def _start(db: str, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([AGENTR1, "gateway", "--model", "tiny", "--db", db, "--port", str(port),
                             "--accept-any-model", "--engine-device", "cpu", "--log-level", "warning"],
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the gateway exited during startup"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise TimeoutError("gateway did not start")


@pytest.mark.timeout(600)
def test_sigkill_loses_no_answered_step_and_restart_continues(tmp_path):
    db, port = f"sqlite:///{tmp_path / 'kill.db'}", free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(db, port)
    answered: list[tuple[str, int]] = []
    conversations: dict[str, list[dict]] = {}
    stop = threading.Event()

    def agent(i: int) -> None:
        with httpx.Client(timeout=60) as client:
            s = client.post(f"{url}/sessions", json={"task_id": f"k{i}"}).json()
            messages = [{"role": "user", "content": f"agent {i}"}]
            while not stop.is_set():
                try:
                    r = client.post(f"{s['base_url']}/chat/completions",
                                    json={"model": "m", "messages": messages, "max_tokens": 4})
                except httpx.TransportError:
                    return  # killed mid-call: this call was never answered
                body = r.json()
                answered.append((s["id"], body["agentr1"]["steps"][0]))
                messages = [*messages, body["choices"][0]["message"], {"role": "user", "content": "more"}]
                conversations[s["id"]] = messages

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    while len(answered) < 60:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    stop.set()
    for t in threads:
        t.join()
    proc.wait()

    with TraceStore.open(db) as store:
        stored = {(s.id, st.index) for s in store.list_sessions(None, limit=100)
                  for st in store.get_session(s.id).steps}
    assert set(answered) <= stored, f"answered but not stored: {set(answered) - stored}"

    proc = _start(db, port)  # a new gateway on the same store picks the sessions up
    try:
        # a session whose last stored step is its last answered one (a call in flight at the kill may
        # have been committed without being answered; that session's next call would be drift)
        last_answered = {sid: max(i for s, i in answered if s == sid) for sid in conversations}
        sid = next(s for s, i in last_answered.items() if i == max(j for t, j in stored if t == s))
        messages, last = conversations[sid], last_answered[sid]
        r = httpx.post(f"{url}/sessions/{sid}/v1/chat/completions",
                       json={"model": "m", "messages": messages, "max_tokens": 4}, timeout=60).json()
        assert r["agentr1"]["steps"] == [last + 1]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    with TraceStore.open(db) as store:
        steps = store.get_session(sid).steps
    prev, new = steps[-2], steps[-1]
    assert new.parent_index == prev.index == last and not new.drift
    assert new.observation_ids[: len(prev.observation_ids) + len(prev.action_ids)] == (
        prev.observation_ids + prev.action_ids)
