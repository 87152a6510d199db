"""A conversation's history is stored once: a step that extends an earlier step of its session stores only
its own messages (``steps.shared_history``), and every read gives the whole lists back."""

from __future__ import annotations

import base64
import json

from sqlalchemy import select
from store_workers import make_step

from agentr1.store import TraceStore, image_refs, migrate
from agentr1.store.database import create_store_engine
from agentr1.store.schema import StepRow

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"pixels").decode()


def _conversation(turns: int) -> list[list[dict]]:
    """The messages each call of a growing conversation sends (the list object grows, as the gateway's)."""
    history: list[dict] = [{"role": "system", "content": "be brief"}]
    calls = []
    for t in range(turns):
        history = [*history, {"role": "user", "content": f"question {t}"}]
        calls.append(history)
        history = [*history, {"role": "assistant", "content": f"answer {t}"}]
    return calls


def _write(store: TraceStore, sid: str, calls: list[list[dict]], start: int = 0) -> None:
    for i, messages in enumerate(calls[start:], start):  # one commit per call, as the gateway's writer
        store.append_steps([make_step(sid, i, messages_sent=messages, messages_seen=messages,
                                      parent_index=i - 1 if i else None)])


def _stored(store: TraceStore, sid: str) -> list[tuple[int, int, dict | None]]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(StepRow.index, StepRow.messages_sent, StepRow.shared_history)
                            .where(StepRow.session_id == sid).order_by(StepRow.index))
        return [(i, len(sent), shared) for i, sent, shared in rows]


def test_a_growing_conversation_is_stored_once_and_read_whole(store: TraceStore) -> None:
    sid = store.create_session()
    calls = _conversation(6)
    _write(store, sid, calls)
    steps = store.get_session(sid).steps
    assert [s.messages_sent for s in steps] == calls and [s.messages_seen for s in steps] == calls
    stored = _stored(store, sid)
    assert stored[0] == (0, 2, None)
    assert all(n == 2 and shared == {"step": i - 1, "sent": 2 * i, "seen": 2 * i} for i, n, shared in stored[1:])
    assert store.last_step(sid).messages_sent == calls[-1]  # the gateway's session reload
    exported = next(iter(store.iter_sessions(None, statuses=["running"])))
    assert [s.messages_seen for s in exported.steps] == calls


def test_what_extends_nothing_is_stored_whole(store: TraceStore) -> None:
    sid = store.create_session()
    calls = _conversation(3)
    edited = [{"role": "system", "content": "be long"}, *calls[2][1:]]  # the agent rewrote its history
    branch = calls[1][:2]  # a new conversation from step 0's prefix: shares step 0's messages, which it extends
    _write(store, sid, [*calls[:2], edited])
    store.append_steps([make_step(sid, 3, messages_sent=[*branch, {"role": "user", "content": "other"}],
                                  messages_seen=[], parent_index=0)])
    steps = store.get_session(sid).steps
    assert [s.messages_sent for s in steps] == [*calls[:2], edited, [*branch, {"role": "user", "content": "other"}]]
    assert steps[3].messages_seen == []
    assert [shared for _, _, shared in _stored(store, sid)] == [
        None, {"step": 0, "sent": 2, "seen": 2}, None, {"step": 0, "sent": 2, "seen": 0}]


def test_another_writer_without_the_history_stores_whole_rows(db_url: str) -> None:
    calls = _conversation(4)
    with TraceStore.open(db_url, migrate=False) as first:
        sid = first.create_session()
        _write(first, sid, calls[:2])
    with TraceStore.open(db_url, migrate=False) as second:  # another process (or a restart) continues it
        _write(second, sid, calls, start=2)
        assert [s.messages_sent for s in second.get_session(sid).steps] == calls
        assert [shared is None for _, _, shared in _stored(second, sid)] == [True, False, True, False]


def test_shared_images_are_stored_once_and_come_back(store: TraceStore) -> None:
    sid = store.create_session()
    first = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                                          {"type": "text", "text": "what is this?"}]}]
    second = [*first, {"role": "assistant", "content": "a picture"}, {"role": "user", "content": "sure?"}]
    _write(store, sid, [first, second])
    steps = store.get_session(sid).steps
    assert len(image_refs(steps[1].messages_sent)) == 1 and steps[1].messages_sent[0] == steps[0].messages_sent[0]
    assert steps[1].messages_sent[1:] == second[1:] and _stored(store, sid)[1][1] == 2


def test_downgrade_writes_the_whole_lists_back(db_url: str) -> None:
    calls = _conversation(3)
    with TraceStore.open(db_url, migrate=False) as store:
        sid = store.create_session()
        _write(store, sid, calls)
    engine = create_store_engine(db_url)
    try:
        migrate.downgrade(engine, "0002")
        with engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT messages_sent FROM steps ORDER BY \"index\"").all()
        assert [len(r[0] if isinstance(r[0], list) else json.loads(r[0])) for r in rows] == [len(c) for c in calls]
        migrate.upgrade(engine)
    finally:
        engine.dispose()
