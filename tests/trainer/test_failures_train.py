"""Failure taxonomy in the training loop: a tool server that dies mid-rollout makes its sessions fail
as `environment` failures, and nothing of them (in particular no zero-reward row) reaches the batch;
incomplete groups are dropped or completed by resampling; sampling settings are checked.

The environment runs every model reply in a sandbox tool behind a real HTTP server (stdlib
ThreadingHTTPServer in a thread): the agent calls it over HTTP with httpx, as a real tool would.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentr1.envs import AgentEnvLoop, BaseTool, StepResult, ToolEnv, ToolResult, run_tool_calls
from agentr1.sdk import failure_kind_of_error
from agentr1.store import TraceStore
from agentr1.trainer.batch import BatchConfig, build_rows
from agentr1.trainer.config import JobConfig
from agentr1.trainer.groups import SamplingMismatch
from agentr1.trainer.loop import Trainer

URL_VAR = "AGENTR1_TEST_SANDBOX_URL"


class SandboxServer:
    """A tool server: POST /run answers {"output": ...}. ``die_after``: it shuts down for good after
    that many answers; ``crash_on``: request numbers whose connection it drops without an answer."""

    def __init__(self, *, die_after: int | None = None, crash_on: frozenset[int] = frozenset()) -> None:
        self.served = 0
        self.requests = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                with outer.lock:
                    outer.requests += 1
                    number = outer.requests
                if number in outer.crash_on:  # the worker crashes mid-request: no answer at all
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                payload = json.dumps({"output": f"ran {len(str(body.get('code', '')))} characters"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                with outer.lock:
                    outer.served += 1
                    if outer.die_after is not None and outer.served == outer.die_after:
                        threading.Thread(target=outer.stop).start()

        self.die_after, self.crash_on = die_after, crash_on
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.stopped = False

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.server.shutdown()
            self.server.server_close()


class Sandbox(BaseTool):
    name = "sandbox"
    description = "Run the reply in the sandbox."
    parameters = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.post(os.environ[URL_VAR] + "/run", json={"code": arguments["code"]})
            response.raise_for_status()
        return ToolResult(response.json()["output"])


class SandboxEnv(ToolEnv):
    """Two turns; each model reply runs in the sandbox tool, whose output is the next observation."""

    def __init__(self, task: dict[str, Any]) -> None:
        super().__init__(task, tools=[Sandbox()])
        self.turns = 0

    async def step(self, action: dict[str, Any]) -> StepResult:
        self.history.append({"role": "assistant", "content": str(action.get("content") or "")})
        call = {"id": f"run{self.turns}", "type": "function",
                "function": {"name": "sandbox", "arguments": json.dumps({"code": str(action.get("content") or "")})}}
        [outcome] = await run_tool_calls([call], self.tools)
        self.turns += 1
        self.history.append({"role": "user", "content": outcome.result.content})
        return StepResult(self.build_observation(), 0.0, self.turns >= 2)


async def solve(task: dict[str, Any]) -> None:
    await AgentEnvLoop(SandboxEnv(task), max_steps=2, max_tokens=6, temperature=task.get("temperature", 1.0)).run()


def make_tasks(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    return [{"id": f"{split}-{i}", "question": f"Write a program that prints {i}."} for i in range(n)]


def job(tmp_path: Path, model: Path, **algorithm: Any) -> JobConfig:
    return JobConfig.model_validate({
        "run_name": "failures", "db": f"sqlite:///{tmp_path / 'traces.db'}",
        "agent": {"entrypoint": "test_failures_train:solve", "timeout_s": 60},
        "data": {"generator": "test_failures_train:make_tasks", "train_size": 8, "val_size": 1, "train_batch_size": 2},
        "reward": {"functions": ["e2e_agent:token_reward"]},
        "algorithm": {"adv_estimator": "grpo", **algorithm},
        "actor_rollout_ref": {"model": str(model), "rollout": {"n": 3, "max_concurrency": 6}},
        "trainer": {"total_training_steps": 1, "default_local_dir": str(tmp_path / "out"), "device": "cpu"},
    })


def rollout_once(config: JobConfig, server: SandboxServer, monkeypatch: pytest.MonkeyPatch):
    """One rollout stage of the real trainer (gateway, agent, rewards, groups), then the batch it builds."""
    monkeypatch.setenv(URL_VAR, server.url)
    trainer = Trainer(config, quiet=True)
    trainer.setup()
    try:
        data = asyncio.run(trainer.run.source.take(1))
        metrics = trainer.run.groups.take_metrics()
        with TraceStore.open(config.db.removeprefix("sqlite:///")) as store:
            everything = store.list_sessions(trainer.run.progress.run_id, limit=100)
    finally:
        trainer.close()
        server.stop()
    batch = build_rows(data.sessions, BatchConfig(layout="merged"), rewards=data.rewards)
    return data, metrics, everything, batch


@pytest.mark.timeout(600)
def test_a_dead_tool_server_fails_its_sessions_and_their_groups_leave_the_batch(tmp_path, tiny_model_path,
                                                                               monkeypatch):
    # 6 sessions x 2 tool calls; the server dies after answering 5
    data, metrics, sessions, batch = rollout_once(job(tmp_path, tiny_model_path, incomplete_groups="drop"),
                                                  SandboxServer(die_after=5), monkeypatch)
    failed = [s for s in sessions if s.status == "failed"]
    assert len(sessions) == 6 and failed, "the server's death should have failed some sessions"
    assert {failure_kind_of_error(s.error) for s in failed} == {"environment"}
    assert all("sandbox is unavailable" in (s.error or "") for s in failed)
    broken_groups = {s.group_id for s in failed}
    trained = {row.session_id for row in batch.rows}
    assert not trained & {s.id for s in failed}  # no row (zero reward or any) of a failed session
    assert not {s.group_id for s in data.sessions} & broken_groups  # and their groups are dropped whole
    assert trained == {s.id for s in data.sessions}
    assert metrics["failures/environment"] == metrics["failures/infrastructure"] == len(failed)
    assert metrics["groups/dropped"] == len(broken_groups) == metrics["groups/incomplete"]
    assert metrics["groups/complete"] == 2 - len(broken_groups)


@pytest.mark.timeout(600)
def test_resampling_completes_a_group_whose_tool_call_crashed(tmp_path, tiny_model_path, monkeypatch):
    # the third request's connection drops without an answer (a crashed worker); the server lives on
    data, metrics, sessions, batch = rollout_once(
        job(tmp_path, tiny_model_path, incomplete_groups="resample", resample_attempts=2),
        SandboxServer(crash_on=frozenset({3})), monkeypatch)
    [failed] = [s for s in sessions if s.status == "failed"]
    assert failure_kind_of_error(failed.error) == "environment"
    assert metrics["groups/resampled"] == 1 and metrics["groups/completed_by_resampling"] == 1
    assert metrics["groups/dropped"] == 0 and metrics["failures/environment"] == 1
    resampled = [s for s in sessions if s.metadata["sample"] >= 1000]
    assert len(resampled) == 1 and resampled[0].status == "finished" and resampled[0].group_id == failed.group_id
    members = [s for s in data.sessions if s.group_id == failed.group_id]
    assert len(members) == 3 and failed.id not in {s.id for s in members} and resampled[0].id in {s.id for s in members}
    assert {row.session_id for row in batch.rows} == {s.id for s in data.sessions} and len(data.sessions) == 6


@pytest.mark.timeout(600)
def test_a_temperature_the_job_did_not_set_is_a_clear_error(tmp_path, tiny_model_path, monkeypatch):
    config = job(tmp_path, tiny_model_path)
    config.actor_rollout_ref.rollout.temperature = 0.7  # the agent samples at 1.0 (solve's default)
    with pytest.raises(SamplingMismatch, match=r"sampled with temperature=1\.0, but actor_rollout_ref\.rollout\."
                                               r"temperature is 0\.7"):
        rollout_once(config, SandboxServer(), monkeypatch)


@pytest.mark.timeout(600)
def test_async_training_never_takes_the_group_of_a_crashed_tool_call(tmp_path, tiny_model_path, monkeypatch):
    config = job(tmp_path, tiny_model_path, incomplete_groups="drop")
    config.trainer.mode, config.actor_rollout_ref.rollout.max_staleness = "async", 1
    server = SandboxServer(crash_on=frozenset({5}))  # requests 1-2: the held-out evaluation before training
    monkeypatch.setenv(URL_VAR, server.url)
    trainer = Trainer(config, quiet=True)
    trainer.setup()
    try:
        trainer.train()
        run_id = trainer.run.progress.run_id
    finally:
        trainer.close()
        server.stop()
    with TraceStore.open(tmp_path / "traces.db") as store:
        sessions = store.list_sessions(run_id, limit=100)
    crashed = [s for s in sessions if s.status == "failed" and failure_kind_of_error(s.error) == "environment"]
    assert len(crashed) == 1
    [update] = [json.loads(line) for line in (tmp_path / "out" / "async_groups.jsonl").read_text().splitlines()]
    trained = {sid for group in update["trained"] for sid in group["sessions"]}
    assert len(update["trained"]) == 2 and len(trained) == 6
    assert crashed[0].group_id not in {group["group_id"] for group in update["trained"]}
    assert all(s.status == "finished" for s in sessions if s.id in trained)
