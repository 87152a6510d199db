"""The gateway process SIGKILLed under load (plain and streamed calls, sessions finishing and
starting), then restarted on the same SQLite file with ``abandon_idle_s``.

Afterwards: every answered call is a stored step, and the only stored steps that were not answered
are the calls in flight at the kill (at most one per agent, the last of its session); steps are
contiguous per session, with whole token arrays; the sessions the kill interrupted are marked
abandoned by the restarted gateway; the trainer's selection (finished sessions, `iter_groups`) sees
exactly the finished sessions (those the agents finished, and any whose finish was committed just
before the kill), each complete, and `build_rows` turns them into rows.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from agentr1.store import TraceStore
from agentr1.trainer.batch import BatchConfig, build_rows
from gateway_server import start_server

AGENTS, TURNS_PER_SESSION = 12, 4


class Agents:
    """Threads that each run sessions of TURNS_PER_SESSION turns, finishing each, until the kill."""

    def __init__(self, url: str, run_id: str) -> None:
        self.url, self.run_id = url, run_id
        self.answered: set[tuple[str, int]] = set()
        self.finished: set[str] = set()
        self.sessions: set[str] = set()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.agent, args=(i,)) for i in range(AGENTS)]

    def agent(self, i: int) -> None:
        with httpx.Client(timeout=60) as client:
            try:
                while True:
                    self.session(client, i)
            except httpx.TransportError:
                return  # the gateway is gone: this call was never answered

    def session(self, client: httpx.Client, i: int) -> None:
        s = client.post(f"{self.url}/sessions", json={"run_id": self.run_id, "task_id": f"t{i}"}).json()
        with self.lock:
            self.sessions.add(s["id"])
        messages = [{"role": "user", "content": f"agent {i}"}]
        for turn in range(TURNS_PER_SESSION):
            body = {"model": "m", "messages": messages, "max_tokens": 8, "stream": i % 2 == 1}
            if body["stream"]:
                step, content = self.streamed(client, f"{s['base_url']}/chat/completions", body)
            else:
                r = client.post(f"{s['base_url']}/chat/completions", json=body).json()
                step, content = r["agentr1"]["steps"][0], r["choices"][0]["message"]["content"]
            with self.lock:
                self.answered.add((s["id"], step))
            messages = [*messages, {"role": "assistant", "content": content}, {"role": "user", "content": f"{turn}"}]
        client.post(f"{self.url}/sessions/{s['id']}/finish", json={"reward": 1.0}).raise_for_status()
        with self.lock:
            self.finished.add(s["id"])

    @staticmethod
    def streamed(client: httpx.Client, url: str, body: dict) -> tuple[int, str]:
        import json

        content, step = "", None
        with client.stream("POST", url, json=body) as r:
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                for choice in event.get("choices", []):
                    content += choice["delta"].get("content") or ""
                if "agentr1" in event:
                    step = event["agentr1"]["steps"][0]
        if step is None:  # the stream was cut before it said it was done: not answered
            raise httpx.RemoteProtocolError("stream ended early")
        return step, content


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigkill_under_load_then_restart_leaves_a_consistent_store(tmp_path, monkeypatch):
    db = f"sqlite:///{tmp_path / 'kill.db'}"
    monkeypatch.setenv("AGENTR1_ABANDON_IDLE_S", "1")
    with start_server(kind="instant", model="tiny", db=db) as server:
        agents = Agents(server.url, "killed")
        for t in agents.threads:
            t.start()
        while len(agents.finished) < 10 or len(agents.answered) < 150:
            time.sleep(0.05)
        os.kill(server.pid, signal.SIGKILL)
        for t in agents.threads:
            t.join()

    with TraceStore.open(db) as store:
        records = {sid: store.get_session(sid) for sid in agents.sessions}
    stored = {(sid, st.index) for sid, r in records.items() for st in r.steps}
    assert agents.answered <= stored, f"answered but not stored: {agents.answered - stored}"
    unanswered = stored - agents.answered  # committed, but the kill came before the answer went out
    assert len(unanswered) <= AGENTS
    for sid, index in unanswered:
        assert index == max(i for s, i in stored if s == sid), "only a session's last step can be unanswered"
    for r in records.values():
        assert [s.index for s in r.steps] == list(range(len(r.steps)))
        for step in r.steps:
            assert step.action_logprobs is not None and len(step.action_logprobs) == len(step.action_ids) > 0
        for prev, step in zip(r.steps, r.steps[1:], strict=False):
            assert step.parent_index == prev.index and not step.drift and prev.feedback_ids
    finished = {sid for sid, r in records.items() if r.status == "finished"}
    late = finished - agents.finished  # finishes committed, but the kill came before their answer
    assert agents.finished <= finished and len(late) <= AGENTS
    assert all(len(records[sid].steps) == TURNS_PER_SESSION for sid in late)
    interrupted = agents.sessions - finished
    assert interrupted and all(records[sid].status == "running" for sid in interrupted)

    with start_server(kind="instant", model="tiny", db=db):  # restarted on the same store
        deadline = time.monotonic() + 30
        with TraceStore.open(db) as store:
            while any(store.get_session(sid, steps=False).status == "running" for sid in interrupted):
                assert time.monotonic() < deadline, "the restarted gateway did not mark the interrupted sessions"
                time.sleep(0.2)
            selected = [s for group in store.iter_groups("killed") for s in group]  # the trainer's selection
            statuses = {sid: store.get_session(sid, steps=False).status for sid in agents.sessions}
    assert all(statuses[sid] == "abandoned" for sid in interrupted)
    assert {s.id for s in selected} == finished
    assert all(len(s.steps) == TURNS_PER_SESSION for s in selected)
    batch = build_rows(selected, BatchConfig(layout="per_step"))  # one row per step
    assert len(batch.rows) == TURNS_PER_SESSION * len(selected)
    assert {row.session_id for row in batch.rows} == finished
