"""steps.shared_history: a step stores only the messages it does not share with an earlier step of its session

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 14:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing rows keep their whole message lists (NULL: nothing shared); see agentr1/store/history.py.
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("shared_history", sa.JSON(), nullable=True))


def downgrade() -> None:
    # Rows that share messages get their whole lists back before the column goes (history.restore_histories).
    steps = sa.table("steps", sa.column("id", sa.Integer), sa.column("session_id", sa.String), sa.column("index", sa.Integer),
                     sa.column("messages_sent", sa.JSON), sa.column("messages_seen", sa.JSON),
                     sa.column("shared_history", sa.JSON))
    conn = op.get_bind()
    sessions = conn.execute(sa.select(steps.c.session_id).where(steps.c.shared_history.is_not(None)).distinct())
    for (session_id,) in list(sessions):
        whole: dict[int, tuple[list, list]] = {}
        rows = conn.execute(sa.select(steps).where(steps.c.session_id == session_id).order_by(steps.c["index"]))
        for row in [r._mapping for r in rows]:
            sent, seen, shared = row["messages_sent"] or [], row["messages_seen"] or [], row["shared_history"]
            if shared:
                base_sent, base_seen = whole[shared["step"]]
                sent, seen = [*base_sent[:shared["sent"]], *sent], [*base_seen[:shared["seen"]], *seen]
                conn.execute(steps.update().where(steps.c.id == row["id"]).values(messages_sent=sent,
                                                                                   messages_seen=seen))
            whole[row["index"]] = (sent, seen)
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.drop_column("shared_history")
