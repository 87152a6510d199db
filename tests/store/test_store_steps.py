"""Appending steps: big batches, ordering, conflicts, unknown sessions and feedback e_t."""

from __future__ import annotations

import random

import pytest
from store_workers import make_step, obs_ids

from agentr1.store import FeedbackRecord, StepConflict, TraceStore, UnknownSession, UnknownStep


def test_batch_of_10000_steps_in_one_call(store: TraceStore) -> None:
    sid = store.create_session(run_id="big")
    n = 10_000
    lean = {"messages_sent": [], "messages_seen": [], "action": {}}  # keep the test about the rows, not JSON
    store.append_steps([make_step(sid, i, n_obs=16, n_act=4, **lean) for i in range(n)])

    rec = store.get_session(sid)
    assert rec.n_steps == n
    assert [s.index for s in rec.steps] == list(range(n))
    for i in (0, 1, 4_999, n - 1):
        assert rec.steps[i].observation_ids == obs_ids(sid, i, 16)
        assert rec.steps[i].action_ids == [i * 10 + k for k in range(4)]
    run = store.get_run("big")
    assert (run.n_sessions, run.n_steps) == (1, n)
    assert store.last_step(sid).index == n - 1


def test_steps_ordered_by_index_regardless_of_insertion_order(store: TraceStore) -> None:
    a = store.create_session()
    b = store.create_session()
    order = list(range(40))
    random.Random(7).shuffle(order)
    # Interleave sessions, single inserts and mixed batches, in a scrambled index order.
    store.append_steps([make_step(a, i) for i in order[:15]] + [make_step(b, i) for i in order[:5]])
    for i in order[15:30]:
        store.append_steps([make_step(a, i)])
    store.append_steps([make_step(b, i) for i in order[5:]] + [make_step(a, i) for i in order[30:]])

    for sid in (a, b):
        steps = store.get_session(sid).steps
        assert [s.index for s in steps] == list(range(40))
        assert all(s.session_id == sid and s.observation_ids == obs_ids(sid, s.index) for s in steps)
    assert store.last_step(a).index == 39
    assert store.last_step(store.create_session()) is None


def test_sparse_and_branching_indices(store: TraceStore) -> None:
    sid = store.create_session()
    store.append_steps([make_step(sid, 10), make_step(sid, 2), make_step(sid, 5, parent_index=2),
                        make_step(sid, 6, parent_index=2)])
    steps = store.get_session(sid).steps
    assert [(s.index, s.parent_index) for s in steps] == [(2, None), (5, 2), (6, 2), (10, None)]


def test_duplicate_step_raises_conflict_and_writes_nothing(store: TraceStore) -> None:
    sid = store.create_session()
    store.append_steps([make_step(sid, 0), make_step(sid, 1)])
    with pytest.raises(StepConflict, match=r"same \(session, index\)"):
        store.append_steps([make_step(sid, 1, action_ids=[999])])
    with pytest.raises(StepConflict):  # a conflict later in a batch rolls back the whole batch
        store.append_steps([make_step(sid, 2), make_step(sid, 3), make_step(sid, 0)])
    with pytest.raises(StepConflict):  # duplicates inside one batch
        store.append_steps([make_step(sid, 7), make_step(sid, 7)])
    steps = store.get_session(sid).steps
    assert [s.index for s in steps] == [0, 1]
    assert steps[1].action_ids == [10, 11, 12, 13]  # the original, not the rejected one
    other = store.create_session()
    store.append_steps([make_step(other, 0)])  # the same index in another session is fine
    assert store.get_session(other).n_steps == 1


def test_unknown_session_rejected_atomically(store: TraceStore) -> None:
    sid = store.create_session()
    with pytest.raises(UnknownSession, match="no-such-session"):
        store.append_steps([make_step(sid, 0), make_step("no-such-session", 0)])
    assert store.get_session(sid).n_steps == 0
    with pytest.raises(UnknownSession):
        store.get_session("no-such-session")
    store.append_steps([])  # nothing to do is not an error


def test_attach_feedback(store: TraceStore) -> None:
    sid = store.create_session()
    store.append_steps([make_step(sid, 0), make_step(sid, 1)])
    tool_msg = [{"role": "tool", "tool_call_id": "c1", "content": "84"}]
    store.attach_feedback(sid, 0, tool_msg, [5, 6, 2**31 - 1])
    store.attach_feedback(sid, 1, [{"role": "user", "content": "thanks"}], None)
    steps = store.get_session(sid).steps
    assert (steps[0].feedback_messages, steps[0].feedback_ids) == (tool_msg, [5, 6, 2**31 - 1])
    assert (steps[1].feedback_messages, steps[1].feedback_ids) == ([{"role": "user", "content": "thanks"}], None)
    # attaching again replaces e_t
    store.attach_feedback(sid, 0, [], [])
    assert (store.get_session(sid).steps[0].feedback_messages, store.get_session(sid).steps[0].feedback_ids) == ([], [])

    with pytest.raises(UnknownStep, match="has no step 5"):
        store.attach_feedback(sid, 5, tool_msg, [1])
    with pytest.raises(UnknownStep):
        store.attach_feedback("no-such-session", 0, tool_msg, [1])


def test_append_steps_with_feedback_in_one_transaction(store: TraceStore) -> None:
    sid = store.create_session()
    store.append_steps([make_step(sid, 0)])
    fb = FeedbackRecord(sid, 0, [{"role": "tool", "content": "ok"}], [1, 2, 3])
    store.append_steps([make_step(sid, 1)], feedback=[fb])
    steps = store.get_session(sid).steps
    assert [s.index for s in steps] == [0, 1]
    assert (steps[0].feedback_messages, steps[0].feedback_ids) == ([{"role": "tool", "content": "ok"}], [1, 2, 3])
    assert steps[1].feedback_messages is None

    # feedback for a step that does not exist rolls back the steps of the same call
    with pytest.raises(UnknownStep):
        store.append_steps([make_step(sid, 2)], feedback=[FeedbackRecord(sid, 9, [], None)])
    assert store.get_session(sid).n_steps == 2
