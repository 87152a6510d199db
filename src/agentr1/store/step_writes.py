"""What recording steps writes, inside one write transaction of :class:`~agentr1.store.TraceStore`
(:mod:`agentr1.store.writes` runs it): the rows of new steps, and the feedback e_t attached to stored steps. The
gateway's write path runs these prebuilt Core statements on one connection: building statements and an ORM
session per commit cost more CPU than the SQL itself."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select, update

from agentr1.store.arrays import encode_ids
from agentr1.store.errors import UnknownStep
from agentr1.store.records import FeedbackRecord
from agentr1.store.schema import StepRow

__all__ = ["attach_feedback", "insert_steps"]

_STEPS = StepRow.__table__
_INSERT_STEPS = insert(_STEPS)
_ATTACH_FEEDBACK = (
    update(_STEPS)
    .where(_STEPS.c.session_id == bindparam("b_session"), _STEPS.c.index == bindparam("b_index"))
    .values(feedback_messages=bindparam("b_messages"), feedback_ids=bindparam("b_ids"))
)


def insert_steps(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """The ``steps`` rows, one executemany, in the caller's transaction."""
    if rows:
        conn.execute(_INSERT_STEPS, rows)


def attach_feedback(conn: Connection, feedback: Sequence[FeedbackRecord]) -> None:
    """One executemany for all feedback, in the caller's transaction; ``UnknownStep`` names a step not stored."""
    if not feedback:
        return
    rows = [{"b_session": fb.session_id, "b_index": fb.index, "b_messages": fb.messages,
             "b_ids": encode_ids(fb.ids)} for fb in feedback]
    result = conn.execute(_ATTACH_FEEDBACK, rows)
    if result.rowcount != len(rows):  # find the step that is missing, for a useful error
        for fb in feedback:
            found = conn.scalar(select(_STEPS.c.id).where(_STEPS.c.session_id == fb.session_id,
                                                          _STEPS.c.index == fb.index))
            if found is None:
                raise UnknownStep(fb.session_id, fb.index)
