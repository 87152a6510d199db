"""Discarding a session that its calls left empty (issue 40: a refused call leaves nothing behind), on SQLite and
PostgreSQL: only a running session with no step and no reward goes."""

from __future__ import annotations

import pytest
from store_workers import make_step

from agentr1.store import TraceStore, UnknownSession


def test_only_an_empty_running_session_is_discarded(store: TraceStore) -> None:
    empty, stepped, rewarded, finished = (store.create_session() for _ in range(4))
    store.append_steps([make_step(stepped, 0)])
    store.add_reward(rewarded, 1.0)
    store.finish_session(finished)
    assert store.discard_session(empty) is True
    with pytest.raises(UnknownSession):
        store.get_session(empty)
    for kept in (stepped, rewarded, finished):
        assert store.discard_session(kept) is False
        store.get_session(kept)
    assert store.discard_session(empty) is False  # gone already
    again = store.create_session(session_id=empty)  # the name is free again
    assert store.try_discard_session(again) in (True, None)  # None: PostgreSQL never writes in place
