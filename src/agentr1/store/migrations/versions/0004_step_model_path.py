"""steps.model_path: the model directory that served a step, beside the name it was served under

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-07 00:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Steps stored before it keep NULL: their model directory is unknown (the viewer falls back to the served name).
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("model_path", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.drop_column("model_path")
