"""How the store's writes reach the database: :class:`Writes`.

Every write runs in one transaction on the writer engine (on SQLite ``BEGIN IMMEDIATE``: a writer takes the
write lock up front, so two writers never deadlock on a lock upgrade). Two more things, both for SQLite:

- A process's writers take turns on a lock of their own before they take SQLite's. A writer that finds
  SQLite's write lock held sleeps in SQLite's busy handler (1, 2, 5, 10, ... ms) however soon the lock is free:
  20 threads opening 128 sessions took 80 ms against 25 ms one at a time, and 30-40 ms taking turns here.
- A transaction may be asked not to wait (``wait=False``): it runs only if no other writer holds the lock at
  this moment (``busy_timeout`` 0 for that one transaction), else nothing is written. For a caller on an event
  loop: write in place when that costs only CPU, hand the work to a thread when it would wait. On PostgreSQL
  such a transaction always declines (a network round trip).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

__all__ = ["Writes"]

T = TypeVar("T")


def sqlite_busy(exc: OperationalError) -> bool:
    """SQLite refused a lock another connection holds (SQLITE_BUSY / SQLITE_LOCKED)."""
    text = str(exc.orig).lower()
    return "locked" in text or "busy" in text


class Writes:
    """The write transactions of one store on ``engine``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine.execution_options(sqlite_write=True)  # SQLite: BEGIN IMMEDIATE (store/database.py)
        self.sqlite = engine.dialect.name == "sqlite"
        self._turn = threading.Lock() if self.sqlite else None

    @contextmanager
    def turn(self, *, wait: bool = True) -> Iterator[bool]:
        """This process's turn to write (SQLite); yields whether it has it (``wait=False``: only if free now)."""
        if self._turn is None:
            yield True
            return
        got = self._turn.acquire(blocking=wait)
        try:
            yield got
        finally:
            if got:
                self._turn.release()

    @contextmanager
    def orm(self) -> Iterator[Session]:
        """An ORM session in one write transaction, committed at the end of the block."""
        with self.turn(), Session(self.engine, expire_on_commit=False) as db:
            with db.begin():
                yield db

    def transaction(self, write: Callable[[Connection], T], *, wait: bool) -> tuple[bool, T | None]:
        """``(True, write(conn))``, run in one write transaction (Core); with ``wait=False``, ``(False, None)`` and
        nothing written if it would have to wait (see the module's text)."""
        if not wait and not self.sqlite:
            return False, None
        with self.turn(wait=wait) as turn, self.engine.connect() as conn:
            if not turn:  # another thread of this process is writing: SQLite's lock is not free either
                return False, None
            raw = conn.connection.driver_connection  # (on SQLAlchemy's connection a PRAGMA would autobegin)
            if not wait:
                (busy_ms,) = raw.execute("PRAGMA busy_timeout").fetchone()
                raw.execute("PRAGMA busy_timeout=0")
            try:
                with conn.begin():  # committed on exit
                    result = write(conn)
            except OperationalError as exc:
                if wait or not sqlite_busy(exc):
                    raise
                return False, None  # rolled back: nothing written
            finally:
                if not wait:
                    raw.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
        return True, result
