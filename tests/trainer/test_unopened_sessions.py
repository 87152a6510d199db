"""A run whose session the gateway never created (``POST /sessions`` failed) is a missing member of
its group: counted as an infrastructure failure (``backend``), and its group dropped or resampled,
never trained as a smaller, complete-looking group.

The gateway is the trainer's real one (embedded engine, real HTTP); its trace store refuses to
create the chosen sessions (a database error), so the gateway answers ``POST /sessions`` with a 500.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import threading
from typing import Any

import pytest
from test_failures_train import URL_VAR, SandboxServer, job

from agentr1.sdk import SessionBatches
from agentr1.store import NewSession, TraceStore
from agentr1.trainer import rollout
from agentr1.trainer.batch import BatchConfig, build_rows
from agentr1.trainer.loop import Trainer


class RefusingStore:
    """Makes the store fail to create sessions (as a database that is down would) for the calls ``refuse`` picks
    (one call: the sessions of one ``POST /sessions``); counts the sessions refused."""

    def __init__(self, store: TraceStore, refuse: Any) -> None:
        self.create, self.refuse, self.refused, self.calls = store.create_sessions, refuse, 0, 0
        self.lock = threading.Lock()
        store.create_sessions = self  # type: ignore[method-assign]
        store.try_create_sessions = lambda sessions: None  # type: ignore[method-assign]  # (all through the above)

    def __call__(self, sessions: list[NewSession]) -> list[str]:
        with self.lock:
            self.calls += 1
            refused = self.refuse(self.calls, dataclasses.asdict(sessions[0]))
            self.refused += len(sessions) if refused else 0
        if refused:
            raise RuntimeError("database is locked")
        return list(self.create(sessions))


def rollout_with_refusals(tmp_path, model, monkeypatch, refuse, *, batch: int = 1, **algorithm: Any):
    """One rollout stage of the real trainer, its sessions opened ``batch`` to a request (at most)."""
    monkeypatch.setattr(rollout, "SessionBatches", functools.partial(SessionBatches, max_batch=batch))
    config = job(tmp_path, model, **algorithm)
    server = SandboxServer()
    monkeypatch.setenv(URL_VAR, server.url)
    trainer = Trainer(config, quiet=True)
    trainer.setup()
    try:
        refusing = RefusingStore(trainer.run.store, refuse)
        data = asyncio.run(trainer.run.source.take(1))
        metrics = {**data.metrics, **trainer.run.groups.take_metrics()}
        with TraceStore.open(tmp_path / "traces.db") as store:
            stored = store.list_sessions(trainer.run.progress.run_id, limit=100)
    finally:
        trainer.close()
        server.stop()
    batch_rows = build_rows(data.sessions, BatchConfig(layout="merged"), rewards=data.rewards)
    return data, metrics, stored, batch_rows, refusing


@pytest.mark.timeout(600)
def test_a_refused_batch_of_sessions_leaves_every_one_of_them_unopened(tmp_path, tiny_model_path, monkeypatch):
    """The trainer opens a rollout's sessions in one request (6 here); the gateway refusing it is 6 missing
    members: both groups dropped, nothing stored, each counted as a backend failure."""
    data, metrics, stored, _, refusing = rollout_with_refusals(
        tmp_path, tiny_model_path, monkeypatch, lambda n, fields: n == 1, batch=512, incomplete_groups="drop")
    assert refusing.calls == 1 and refusing.refused == 6 and stored == []
    assert metrics["failures/backend"] == 6 and metrics["rollout/unopened"] == 6
    assert metrics["groups/dropped"] == 2 and data.sessions == []


@pytest.mark.timeout(600)
def test_a_session_the_gateway_refused_to_open_drops_its_group(tmp_path, tiny_model_path, monkeypatch):
    # 2 groups x 3 samples, one session a request; the second POST /sessions fails
    data, metrics, stored, batch, refusing = rollout_with_refusals(
        tmp_path, tiny_model_path, monkeypatch, lambda n, fields: n == 2, incomplete_groups="drop")
    assert refusing.refused == 1 and len(stored) == 5  # one session never existed
    groups = {s.group_id for s in stored}
    assert len(groups) == 2
    short = [g for g in groups if sum(s.group_id == g for s in stored) == 2]
    assert len(short) == 1
    assert metrics["failures/backend"] == metrics["failures/infrastructure"] == 1
    assert metrics["rollout/unopened"] == 1 and metrics["rollout/failed"] == 1
    assert metrics["groups/dropped"] == metrics["groups/incomplete"] == 1 and metrics["groups/complete"] == 1
    assert {s.group_id for s in data.sessions} == groups - set(short)  # the short group never trains
    assert len(data.sessions) == 3 and {row.session_id for row in batch.rows} == {s.id for s in data.sessions}


@pytest.mark.timeout(600)
def test_a_group_none_of_whose_sessions_opened_is_still_counted_and_dropped(tmp_path, tiny_model_path,
                                                                          monkeypatch):
    doomed: list[str] = []

    def refuse(n: int, fields: dict[str, Any]) -> bool:  # every session of the first group seen
        doomed[:] = doomed or [fields["group_id"]]
        return fields["group_id"] == doomed[0]

    data, metrics, stored, _, refusing = rollout_with_refusals(tmp_path, tiny_model_path, monkeypatch, refuse,
                                                               incomplete_groups="drop")
    assert refusing.refused == 3 and len(stored) == 3 and doomed[0] not in {s.group_id for s in stored}
    assert metrics["failures/backend"] == 3 and metrics["rollout/unopened"] == 3
    assert metrics["groups/dropped"] == 1 and metrics["groups/complete"] == 1
    assert len(data.sessions) == 3


@pytest.mark.timeout(600)
def test_resampling_replaces_a_session_that_never_opened(tmp_path, tiny_model_path, monkeypatch):
    data, metrics, stored, batch, refusing = rollout_with_refusals(
        tmp_path, tiny_model_path, monkeypatch, lambda n, fields: n == 4,
        incomplete_groups="resample", resample_attempts=2)
    assert refusing.refused == 1 and len(stored) == 6  # 5 first-round sessions + 1 resample
    [resampled] = [s for s in stored if s.metadata["sample"] >= 1000]
    assert resampled.status == "finished"
    assert metrics["failures/backend"] == 1 and metrics["groups/resampled"] == 1
    assert metrics["groups/completed_by_resampling"] == 1 and metrics["groups/dropped"] == 0
    assert metrics["groups/resampled_sessions"] == 1
    members = [s for s in data.sessions if s.group_id == resampled.group_id]
    assert len(members) == 3 and len(data.sessions) == 6
    assert {row.session_id for row in batch.rows} == {s.id for s in data.sessions}
