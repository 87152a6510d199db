"""Every field of a step, session and reward comes back exactly as written."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from sqlalchemy.exc import StatementError
from store_workers import make_step

from agentr1.store import RewardRecord, RunRecord, SessionRecord, StepRecord, TraceStore

INT32_MAX = 2**31 - 1
F32 = np.finfo(np.float32)

# float32 edge values: signed zeros, the smallest subnormal, the smallest normal, the largest finite,
# infinities, NaN, and ordinary logprobs.
EDGE_FLOATS = np.array(
    [0.0, -0.0, 1e-45, -1e-45, F32.tiny, -F32.tiny, F32.max, -F32.max, -np.inf, np.inf, np.nan,
     -1e-8, -0.1, -2.5, -123.456, -F32.eps, -87.33654],
    dtype=np.float32,
)


def bits(values: object) -> np.ndarray:
    """The raw float32 bit patterns: equal bits means bit-exact (NaN and -0.0 included)."""
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def test_step_round_trip_every_field(store: TraceStore) -> None:
    sid = store.create_session(run_id="run-rt", task_id="task-1", group_id="g-1")
    created = dt.datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=dt.UTC)
    step = StepRecord(
        session_id=sid,
        index=0,
        observation_ids=[0, 1, 2, 151_643, INT32_MAX],
        action_ids=[INT32_MAX, 0, 42],
        action_logprobs=[-0.125, -3.0, 0.0],  # exactly representable in float32
        messages_sent=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "12*7? ünï 😀"}],
        messages_seen=[{"role": "user", "content": "12*7? ünï 😀"}],
        tools=[{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}],
        sampling={"temperature": 0.7, "top_p": 0.95, "max_tokens": 64, "stop": ["\n\n"]},
        action={"content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                 "function": {"name": "calc", "arguments": "{\"x\": 1}"}}],
                "reasoning": "think"},
        finish_reason="tool_calls",
        feedback_messages=[{"role": "tool", "tool_call_id": "c1", "content": "84"}],
        feedback_ids=[7, 8, 9],
        policy_version=17,
        backend="sglang",
        model="smollm2-135m",
        trainable=False,
        parent_index=None,
        drift=True,
        latency_ms=12.5,
        created_at=created,
    )
    child = make_step(sid, 1, parent_index=0, latency_ms=None, tools=None, feedback_messages=None,
                      feedback_ids=None, action_logprobs=None, finish_reason=None)
    store.append_steps([step, child])

    got = store.get_session(sid).steps
    assert [s.index for s in got] == [0, 1]
    assert got[0] == step  # dataclass equality: every field, reward None (no reward given)
    assert got[0].created_at == created and got[0].created_at.tzinfo is not None
    assert got[1].parent_index == 0
    for name in ("tools", "feedback_messages", "feedback_ids", "action_logprobs", "finish_reason", "latency_ms"):
        assert getattr(got[1], name) is None, name
    assert got[1].created_at is not None and got[1].created_at.tzinfo is not None


def test_session_and_reward_round_trip(store: TraceStore) -> None:
    before = dt.datetime.now(dt.UTC)
    sid = store.create_session(
        run_id="run-s", task_id="task-9", group_id="grp", policy_version=3,
        metadata={"env": "calc", "seed": 11, "nested": {"a": [1, 2.5, None, True]}, "text": "ünï"},
        session_id="session-fixed-id",
    )
    assert sid == "session-fixed-id"
    store.append_steps([make_step(sid, 0), make_step(sid, 1)])
    store.add_reward(sid, 0.25, name="format", source="environment")
    store.add_reward(sid, -1.5, name="judge", source="judge", step=1)
    store.finish_session(sid, status="failed", reward=1.0, error="tool crashed")
    after = dt.datetime.now(dt.UTC)

    rec = store.get_session(sid)
    assert isinstance(rec, SessionRecord)
    assert (rec.id, rec.run_id, rec.task_id, rec.group_id) == ("session-fixed-id", "run-s", "task-9", "grp")
    assert (rec.status, rec.policy_version, rec.error) == ("failed", 3, "tool crashed")
    assert rec.metadata == {"env": "calc", "seed": 11, "nested": {"a": [1, 2.5, None, True]}, "text": "ünï"}
    assert rec.created_at is not None and rec.finished_at is not None
    assert before <= rec.created_at <= rec.finished_at <= after
    assert rec.reward == 1.25  # session-level rewards only: format + outcome
    assert rec.n_steps == 2 and [s.index for s in rec.steps] == [0, 1]
    assert [s.reward for s in rec.steps] == [None, -1.5]
    assert [(r.name, r.value, r.step_index, r.source) for r in rec.rewards] == [
        ("format", 0.25, None, "environment"), ("judge", -1.5, 1, "judge"), ("outcome", 1.0, None, "agent"),
    ]
    assert all(isinstance(r, RewardRecord) and r.session_id == sid and r.created_at for r in rec.rewards)

    light = store.get_session(sid, steps=False)
    assert light.steps == [] and light.n_steps == 2 and light.reward == 1.25


def test_run_record(store: TraceStore) -> None:
    rid = store.create_run("exp-1", {"lr": 1e-6, "algo": {"adv_estimator": "grpo"}}, run_id="run-cfg")
    run = store.get_run(rid)
    assert isinstance(run, RunRecord)
    assert (run.id, run.name, run.config) == ("run-cfg", "exp-1", {"lr": 1e-6, "algo": {"adv_estimator": "grpo"}})
    assert (run.n_sessions, run.n_steps, run.mean_reward) == (0, 0, None)
    assert run.created_at is not None and run.created_at.tzinfo is not None
    assert store.ensure_run(rid, "other name") == rid
    assert store.get_run(rid).name == "exp-1"  # ensure_run never overwrites
    assert store.ensure_run("run-new") == "run-new" and store.get_run("run-new").name == "run-new"


@pytest.mark.parametrize(
    "ids",
    [[], [0], [INT32_MAX], [INT32_MAX, 0, INT32_MAX - 1, 1, 65_535, 65_536, 2**24 + 1],
     list(range(0, 5000, 3))],
    ids=["empty", "zero", "int32-max", "edges", "many"],
)
def test_token_ids_bit_exact(store: TraceStore, ids: list[int]) -> None:
    sid = store.create_session()
    store.append_steps([make_step(sid, 0, observation_ids=ids, action_ids=ids[::-1], feedback_ids=ids)])
    step = store.get_session(sid).steps[0]
    assert step.observation_ids == ids and type(step.observation_ids) is list
    assert step.action_ids == ids[::-1]
    assert step.feedback_ids == ids  # [] stays [], distinct from None
    assert all(type(i) is int for i in step.observation_ids)


def test_token_ids_from_numpy_and_random(store: TraceStore) -> None:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, INT32_MAX, size=20_000, endpoint=True, dtype=np.int64)
    ids[:2] = [0, INT32_MAX]
    sid = store.create_session()
    store.append_steps([make_step(sid, 0, observation_ids=ids, action_ids=ids[:7].astype(np.uint32))])
    step = store.get_session(sid).steps[0]
    assert np.array_equal(np.asarray(step.observation_ids, dtype=np.int64), ids)
    assert step.action_ids == ids[:7].tolist()


def test_missing_token_arrays(store: TraceStore) -> None:
    sid = store.create_session()
    store.append_steps([make_step(sid, 0, observation_ids=None, action_ids=None, action_logprobs=None,
                                  feedback_ids=None)])
    step = store.get_session(sid).steps[0]
    # Observation/action ids read back as empty lists; the optional arrays stay None.
    assert (step.observation_ids, step.action_ids, step.action_logprobs, step.feedback_ids) == ([], [], None, None)


@pytest.mark.parametrize("bad", [[-1], [INT32_MAX + 1], [2**40], [1.5], [True, False]],
                         ids=["negative", "int32-overflow", "int64", "float", "bool"])
def test_invalid_token_ids_rejected_atomically(store: TraceStore, bad: list) -> None:
    sid = store.create_session()
    with pytest.raises(ValueError, match="int32"):
        store.append_steps([make_step(sid, 0), make_step(sid, 1, action_ids=bad)])
    assert store.get_session(sid).steps == []  # the good step of the batch was not written either


def test_logprobs_float32_bit_exact(store: TraceStore) -> None:
    sid = store.create_session()
    store.append_steps([
        make_step(sid, 0, action_logprobs=EDGE_FLOATS.tolist(), action_ids=list(range(len(EDGE_FLOATS)))),
        make_step(sid, 1, action_logprobs=EDGE_FLOATS, action_ids=list(range(len(EDGE_FLOATS)))),  # ndarray in
        make_step(sid, 2, action_logprobs=[], action_ids=[]),
    ])
    steps = store.get_session(sid).steps
    for step in steps[:2]:
        assert len(step.action_logprobs) == len(EDGE_FLOATS)
        assert np.array_equal(bits(step.action_logprobs), bits(EDGE_FLOATS))
        assert all(type(v) is float for v in step.action_logprobs)
    assert steps[2].action_logprobs == []
    got = steps[0].action_logprobs
    assert got[1] == 0.0 and np.signbit(got[1])  # -0.0 keeps its sign
    assert got[2] == float(np.float32(1e-45)) and got[2] > 0  # smallest subnormal survives
    assert got[8] == -np.inf and np.isnan(got[10])


def test_logprobs_are_stored_as_float32(store: TraceStore) -> None:
    """Python floats that float32 cannot hold come back as their float32 rounding, exactly."""
    values = [-0.1, -2 / 3, -1e-30, -1e30, -np.pi, -0.30000000000000004]
    sid = store.create_session()
    store.append_steps([make_step(sid, 0, action_logprobs=values, action_ids=list(range(len(values))))])
    got = store.get_session(sid).steps[0].action_logprobs
    assert got == [float(np.float32(v)) for v in values]
    assert got[0] != -0.1  # it is float32, not float64


def test_random_float32_bit_patterns(store: TraceStore) -> None:
    rng = np.random.default_rng(1)
    n = 4096
    values = np.ldexp(rng.uniform(-1, 1, n), rng.integers(-149, 128, n)).astype(np.float32)
    sid = store.create_session()
    store.append_steps([make_step(sid, 0, action_logprobs=values, action_ids=list(range(n)))])
    assert np.array_equal(bits(store.get_session(sid).steps[0].action_logprobs), bits(values))


def test_timestamps_normalised_to_utc(store: TraceStore) -> None:
    """An aware timestamp in another zone is the same instant when read back (also on SQLite)."""
    sid = store.create_session()
    plus_two = dt.timezone(dt.timedelta(hours=2))
    local = dt.datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=plus_two)
    store.append_steps([make_step(sid, 0, created_at=local)])
    got = store.get_session(sid).steps[0].created_at
    assert got == local
    assert got.utcoffset() == dt.timedelta(0) and got.hour == 10
    with pytest.raises((ValueError, StatementError), match="timezone-aware"):
        store.append_steps([make_step(sid, 1, created_at=dt.datetime(2026, 1, 1))])
