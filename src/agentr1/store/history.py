"""A conversation's history stored once, not once per step.

An agent re-sends its whole history on every call, so step t's ``messages_sent`` and ``messages_seen`` repeat
step t-1's and add a message or two: stored whole, a session of n steps holds O(n^2) messages, and every step
write serialises, scans and writes the whole history again (the cost per call grew with the turn). So a step
whose messages extend those of an earlier step of its session (its parent, else the step before it) that this
store wrote is stored as that step's leading messages plus its own tail: the ``steps.shared_history`` column
says ``{"step": j, "sent": k, "seen": m}`` (the first k of ``messages_sent`` and m of ``messages_seen`` are
step j's), the JSON columns hold the rest. Readers get whole lists: :func:`restore_histories` rebuilds them
when a session's steps are loaded (every read of the store does; nothing outside it sees the column).

Only committed steps serve as a base (:meth:`HistoryCache.committed`, after the transaction), so a base is
always in the database before a step refers to it; rows written before this column existed, by another
process, or whose base this process has forgotten, are stored whole, as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

__all__ = ["MAX_CACHED_STEPS", "STORE_ONLY_COLUMNS", "HistoryCache", "restore_histories"]

STORE_ONLY_COLUMNS = ("shared_history",)  # steps columns that are no StepRecord field (the store reads them itself)

MAX_CACHED_STEPS = 4096  # committed steps whose messages a later step may share (least recently written go first)
Messages = list[Any]


def _shared(base: Messages, full: Messages) -> int:
    """How many leading messages ``full`` takes from ``base``: all of base, or none (compared in C; the gateway
    hands the same dict objects on, so this is mostly identity checks)."""
    n = len(base)
    return n if n and len(full) >= n and full[:n] == base else 0


class HistoryCache:
    """The messages of the steps this store committed lately, by (session, index)."""

    def __init__(self, capacity: int = MAX_CACHED_STEPS) -> None:
        self.capacity = capacity
        self._steps: OrderedDict[tuple[str, int], tuple[Messages, Messages]] = OrderedDict()
        self._lock = threading.Lock()

    def split(self, step: Any) -> tuple[dict[str, int] | None, Messages, Messages]:
        """(the ``shared_history`` value, the sent tail, the seen tail) of ``step`` (a StepRecord)."""
        sent, seen = step.messages_sent or [], step.messages_seen or []
        with self._lock:
            for base_index in dict.fromkeys((step.parent_index, step.index - 1)):
                if base_index is None or not 0 <= base_index < step.index:
                    continue
                base = self._steps.get((step.session_id, base_index))
                if base is None:
                    continue
                k, m = _shared(base[0], sent), _shared(base[1], seen)
                if k or m:
                    return {"step": base_index, "sent": k, "seen": m}, sent[k:], seen[m:]
        return None, sent, seen

    def committed(self, steps: Sequence[Any]) -> None:
        with self._lock:
            for step in steps:
                key = (step.session_id, step.index)
                self._steps[key] = (step.messages_sent or [], step.messages_seen or [])
                self._steps.move_to_end(key)
            while len(self._steps) > self.capacity:
                self._steps.popitem(last=False)


def restore_histories(records: Sequence[Any], shared: Sequence[dict[str, int] | None]) -> None:
    """Whole message lists in ``records`` (one session's steps, by index), whose rows had ``shared``."""
    by_index: dict[int, Any] = {}
    for record, history in zip(records, shared, strict=True):
        if history:
            base = by_index[history["step"]]  # an earlier step of the session, loaded before this one
            record.messages_sent = [*base.messages_sent[:history["sent"]], *record.messages_sent]
            record.messages_seen = [*base.messages_seen[:history["seen"]], *record.messages_seen]
        by_index[record.index] = record
