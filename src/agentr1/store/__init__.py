"""The step-trace store: schema, migrations and the one API every part of agentr1 uses; and the rows of stored steps
(:func:`lay_out_rows`) that the trainer trains on and the viewer shows."""

from agentr1.store import browse
from agentr1.store.blobs import (
    IMAGE_REF_PREFIX,
    ImageStore,
    externalize_images,
    image_refs,
    inline_images,
    sniff_media_type,
)
from agentr1.store.database import DEFAULT_DB, normalize_url
from agentr1.store.errors import (
    DATABASE_UNAVAILABLE,
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
from agentr1.store.export import export_run, session_with_images
from agentr1.store.jsonio import has_non_finite
from agentr1.store.records import (
    FeedbackRecord,
    NewSession,
    RewardRecord,
    RunRecord,
    SessionEnd,
    SessionRecord,
    StepRecord,
    superseded_steps,
)
from agentr1.store.rows import (
    LAYOUTS,
    TRUNCATIONS,
    RowStep,
    RowTooLongError,
    Segment,
    SessionRows,
    TokenRow,
    Truncation,
    lay_out_rows,
)
from agentr1.store.schema import SESSION_STATUSES
from agentr1.store.session_writes import new_id
from agentr1.store.step_factory import Action, ActionKind, SampledTokens, new_step
from agentr1.store.store import TraceStore

__all__ = [
    "DATABASE_UNAVAILABLE",
    "DEFAULT_DB",
    "IMAGE_REF_PREFIX",
    "LAYOUTS",
    "SESSION_STATUSES",
    "TRUNCATIONS",
    "Action",
    "ActionKind",
    "FeedbackRecord",
    "ImageStore",
    "NewSession",
    "RewardRecord",
    "RowStep",
    "RowTooLongError",
    "RunRecord",
    "SampledTokens",
    "Segment",
    "SessionEnd",
    "SessionExists",
    "SessionNotRunning",
    "SessionRecord",
    "SessionRows",
    "StepConflict",
    "StepRecord",
    "StoreConnectionError",
    "StoreError",
    "StoreNotMigrated",
    "TokenRow",
    "TraceStore",
    "Truncation",
    "UnknownRun",
    "UnknownSession",
    "UnknownStep",
    "browse",
    "export_run",
    "externalize_images",
    "has_non_finite",
    "image_refs",
    "inline_images",
    "lay_out_rows",
    "new_id",
    "new_step",
    "normalize_url",
    "session_with_images",
    "sniff_media_type",
    "superseded_steps",
]
