"""The step-trace store: schema, migrations and the one API every part of agentr1 uses."""

from agentr1.store.engine import DEFAULT_DB, normalize_url
from agentr1.store.errors import (
    SessionExists,
    SessionNotRunning,
    StepConflict,
    StoreConnectionError,
    StoreError,
    StoreNotMigrated,
    UnknownRun,
    UnknownSession,
    UnknownStep,
)
from agentr1.store.export import export_run
from agentr1.store.records import FeedbackRecord, RewardRecord, RunRecord, SessionRecord, StepRecord, superseded_steps
from agentr1.store.store import TraceStore, new_id

__all__ = [
    "DEFAULT_DB",
    "FeedbackRecord",
    "RewardRecord",
    "RunRecord",
    "SessionExists",
    "SessionNotRunning",
    "SessionRecord",
    "StepConflict",
    "StepRecord",
    "StoreConnectionError",
    "StoreError",
    "StoreNotMigrated",
    "TraceStore",
    "UnknownRun",
    "UnknownSession",
    "UnknownStep",
    "export_run",
    "new_id",
    "normalize_url",
    "superseded_steps",
]
