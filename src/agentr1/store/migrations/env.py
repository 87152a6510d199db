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
    # One transaction for the whole upgrade, on SQLite too (its DDL is transactional; Alembic assumes not and
    # commits after each migration). Alembic reads the version once, before the first migration: with a commit
    # between migrations, a second process starting on a fresh file took the write lock in that gap, read the
    # version of the first migration and ran the second one too, and one of the two then failed on its
    # "duplicate column name" (seen once in CI, test_many_processes_open_a_fresh_database_at_once[sqlite]).
    # migrate._run's connection begins IMMEDIATE (the writers' lock), so the whole run now holds it.
    transactional_ddl=True,
)
with context.begin_transaction():
    if connection.dialect.name == "postgresql":
        # Many gateways may start at once: one migrates, the others wait and find it done.
        connection.execute(text("SELECT pg_advisory_xact_lock(72100001)"))
    context.run_migrations()
