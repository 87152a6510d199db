"""Alembic environment: run by agentr1.store.migrate with a live connection."""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

from agentr1.store.schema import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    if connection.dialect.name == "postgresql":
        # Many gateways may start at once: one migrates, the others wait and find it done.
        connection.execute(text("SELECT pg_advisory_xact_lock(72100001)"))
    context.run_migrations()
