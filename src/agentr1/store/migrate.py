"""Schema migrations (Alembic), run programmatically: no alembic.ini to find."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "no migrations shipped"
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    _run(command.upgrade, engine, revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    _run(command.downgrade, engine, revision)


def _run(step: Callable[[Config, str], None], engine: Engine, revision: str) -> None:
    """An Alembic command (upgrade / downgrade to ``revision``) on one connection, committed."""
    cfg = alembic_config()
    with engine.connect().execution_options(sqlite_write=True) as conn:
        cfg.attributes["connection"] = conn
        step(cfg, revision)
        conn.commit()
