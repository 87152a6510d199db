"""Errors raised by the trace store. Each message says what to do about it."""

from __future__ import annotations

from sqlalchemy.exc import InterfaceError, OperationalError

# The database connection or its lock failed (down, restarting, busy past the timeout), not one write: what a
# caller that retries whole batches catches (the gateway's step writer). Other parts never import SQLAlchemy.
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError)


class StoreError(Exception):
    """Base class of every trace store error."""


class StoreConnectionError(StoreError):
    """The database URL is malformed or the database cannot be reached."""


class StoreNotMigrated(StoreError):
    """The database exists but its schema is missing or older than this agentr1."""


class UnknownRun(StoreError, KeyError):
    def __str__(self) -> str:
        return f"no run with id {self.args[0]!r}"


class UnknownSession(StoreError, KeyError):
    def __str__(self) -> str:
        return f"no session with id {self.args[0]!r}"


class UnknownStep(StoreError, KeyError):
    def __str__(self) -> str:
        session_id, index = self.args
        return f"session {session_id!r} has no step {index}"


class SessionExists(StoreError):
    """A session with the requested id already exists."""


class SessionNotRunning(StoreError):
    """Finishing a session that has already ended. (Steps may still be appended to an ended
    session: a step the gateway answered just before the finish is data, not an error.)"""


class StepConflict(StoreError):
    """A step with the same (session, index) is already stored."""
