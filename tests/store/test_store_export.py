"""Exports: JSONL (one session per line) and parquet (one step per row), read back exactly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from store_workers import make_step

from agentr1.store import TraceStore, export_run

LOGPROBS = np.array([-0.1, -1e-30, -20.5, 0.0], dtype=np.float32)


def _populate(store: TraceStore) -> list[str]:
    sids = []
    for k in range(3):
        sid = store.create_session(run_id="exp", task_id=f"t{k}", group_id="g", metadata={"k": k})
        store.append_steps([
            make_step(sid, 0, observation_ids=[0, 2**31 - 1, k], action_ids=[5, 6, 7, k],
                      action_logprobs=LOGPROBS, feedback_ids=[9, k], feedback_messages=[{"role": "tool"}]),
            make_step(sid, 1, observation_ids=list(range(300 + k)), action_ids=[1, 2, 3, 4],
                      action_logprobs=None, tools=[{"type": "function", "function": {"name": "f"}}]),
        ])
        store.add_reward(sid, 0.5, step=1)
        if k < 2:
            store.finish_session(sid, reward=float(k))
        sids.append(sid)
    other = store.create_session(run_id="other")
    store.append_steps([make_step(other, 0)])
    return sids


def test_export_jsonl(store: TraceStore, tmp_path: Path) -> None:
    sids = _populate(store)
    out = tmp_path / "run.jsonl"
    assert export_run(store, "exp", out) == 3  # every status by default, one run only
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(d["id"] for d in lines) == sorted(sids)
    for d in lines:
        want = json.loads(json.dumps(store.get_session(d["id"]).to_dict(), default=lambda v: v.isoformat()))
        assert d == want
        assert set(d) >= {"id", "run_id", "task_id", "group_id", "status", "reward", "metadata", "steps"}
        s0, s1 = d["steps"]
        assert s0["observation_ids"][:2] == [0, 2**31 - 1]
        assert np.array_equal(np.asarray(s0["action_logprobs"], dtype=np.float32).view(np.uint32),
                              LOGPROBS.view(np.uint32))
        assert s1["action_logprobs"] is None and s1["reward"] == 0.5
        assert {"index", "action_ids", "messages_sent", "messages_seen", "tools", "action", "finish_reason",
                "feedback_messages", "feedback_ids", "policy_version", "drift", "latency_ms"} <= set(s0)
    statuses = {d["id"]: d["status"] for d in lines}
    assert sorted(statuses.values()) == ["finished", "finished", "running"]


def test_export_parquet(store: TraceStore, tmp_path: Path) -> None:
    sids = _populate(store)
    out = tmp_path / "run.parquet"
    assert export_run(store, "exp", out) == 3
    table = pq.read_table(out)
    assert table.num_rows == 6
    rows = table.to_pylist()
    for row in rows:
        step = store.get_session(row["session_id"]).steps[row["index"]]
        assert row["observation_ids"] == step.observation_ids
        assert row["action_ids"] == step.action_ids
        assert row["feedback_ids"] == step.feedback_ids
        assert row["action_logprobs"] == step.action_logprobs
        assert json.loads(row["messages_sent"]) == step.messages_sent
        assert json.loads(row["action"]) == step.action
        assert json.loads(row["tools"]) == step.tools
        assert (row["run_id"], row["group_id"]) == ("exp", "g")
        assert row["reward"] == step.reward
        assert row["created_at"] == step.created_at
    assert {r["session_id"] for r in rows} == set(sids)
    by_session = {r["session_id"]: r for r in rows if r["index"] == 0}
    assert [by_session[s]["session_reward"] for s in sids] == [0.0, 1.0, None]
    assert [by_session[s]["status"] for s in sids] == ["finished", "finished", "running"]
    # the token columns are typed int32 / float32 lists, and float32 logprobs are bit-exact
    for name in ("observation_ids", "action_ids", "feedback_ids"):
        assert table.schema.field(name).type.value_type == pa.int32(), name
    assert table.schema.field("action_logprobs").type.value_type == pa.float32()
    first = table.column("action_logprobs").combine_chunks()
    lp = np.asarray(first[rows.index(by_session[sids[0]])].values.to_numpy(zero_copy_only=False), dtype=np.float32)
    assert np.array_equal(lp.view(np.uint32), LOGPROBS.view(np.uint32))


def test_export_parquet_in_several_row_groups(store: TraceStore, tmp_path: Path) -> None:
    sid = store.create_session(run_id="many")
    lean = {"messages_sent": [], "messages_seen": [], "action": {}}
    store.append_steps([make_step(sid, i, **lean) for i in range(2100)])  # more than one write batch of 2048 rows
    out = tmp_path / "many.parquet"
    assert export_run(store, "many", out) == 1
    indices = pq.read_table(out, columns=["index"]).column("index").to_pylist()
    assert indices == list(range(2100))


def test_export_format_errors(store: TraceStore, tmp_path: Path) -> None:
    _populate(store)
    with pytest.raises(ValueError, match="unknown export format 'csv'"):
        export_run(store, "exp", tmp_path / "run.csv")
    out = tmp_path / "run.data"
    assert export_run(store, "exp", out, fmt="jsonl") == 3
    assert len(out.read_text().splitlines()) == 3
    assert export_run(store, "no-such-run", tmp_path / "none.jsonl") == 0
    assert (tmp_path / "none.jsonl").read_text() == ""
