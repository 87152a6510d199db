"""Plain records that the store API takes and returns (no ORM objects leak out).

:class:`StepRecord` is the one declaration of a step's fields: the store's row mapping
(:meth:`StepRecord.row_values`, :meth:`StepRecord.from_row`) and the viewer's ``StepView`` are
derived from it, and a test checks that the ``steps`` table (``schema.StepRow``) has exactly its
stored fields as columns. Field metadata: ``array`` (token arrays stored as compact binary,
:mod:`agentr1.store.arrays`), ``read_side`` (computed when read, not a column).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from agentr1.store.arrays import decode_floats, decode_ids, encode_floats, encode_ids

__all__ = [
    "STEP_COLUMNS",
    "FeedbackRecord",
    "RewardRecord",
    "RunRecord",
    "SessionRecord",
    "StepRecord",
    "superseded_steps",
]

_IDS = {"array": "ids"}
_FLOATS = {"array": "floats"}
_READ_SIDE = {"read_side": True}
_ENCODE = {"ids": encode_ids, "floats": encode_floats}
_DECODE = {"ids": decode_ids, "floats": decode_floats}


@dataclass(slots=True)
class RunRecord:
    id: str
    name: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    created_at: dt.datetime | None = None
    n_sessions: int = 0
    n_steps: int = 0
    mean_reward: float | None = None


@dataclass(slots=True)
class RewardRecord:
    session_id: str
    value: float
    name: str = "reward"
    step_index: int | None = None
    source: str = "agent"
    created_at: dt.datetime | None = None


@dataclass(slots=True)
class FeedbackRecord:
    """e_t of one step: the messages that followed it and the token ids they added to the prompt."""

    session_id: str
    index: int
    messages: list[Any]
    ids: list[int] | None = None


@dataclass(slots=True)
class StepRecord:
    """One model call: z_t = (o_t, a_t, e_t, r_t). Field names are part of the public API."""

    session_id: str
    index: int
    observation_ids: list[int] = field(metadata=_IDS)
    action_ids: list[int] = field(metadata=_IDS)
    action_logprobs: list[float] | None = field(default=None, metadata=_FLOATS)
    messages_sent: list[Any] = field(default_factory=list)
    messages_seen: list[Any] = field(default_factory=list)
    tools: list[Any] | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    action: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    feedback_messages: list[Any] | None = None
    feedback_ids: list[int] | None = field(default=None, metadata=_IDS)
    policy_version: int = 0
    backend: str = ""
    model: str = ""  # the name the model was served under (the trainer's gateway serves its policy as "policy")
    model_path: str | None = None  # the model directory that served it (its tokenizer decodes the ids); None: unknown
    trainable: bool = True
    parent_index: int | None = None
    drift: bool = False
    retry_of: list[int] | None = None  # a client retry: the earlier answered-but-unseen attempts it replaced
    latency_ms: float | None = None
    created_at: dt.datetime | None = None
    reward: float | None = field(default=None, metadata=_READ_SIDE)  # sum of the rewards given to this step
    superseded_by: int | None = field(default=None, metadata=_READ_SIDE)  # the retry that replaced this answer

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def row_values(self) -> dict[str, Any]:
        """The ``steps`` row of this step: its stored fields, token arrays encoded."""
        values = {f.name: _encode(f, getattr(self, f.name)) for f in _STORED}
        values["created_at"] = self.created_at or dt.datetime.now(dt.UTC)
        return values

    @classmethod
    def from_row(cls, row: Any, reward: float | None = None) -> StepRecord:
        """The record of a ``steps`` row (any object with the stored fields as attributes)."""
        return cls(**{f.name: _decode(f, getattr(row, f.name)) for f in _STORED}, reward=reward)


_STORED = tuple(f for f in dataclasses.fields(StepRecord) if not f.metadata.get("read_side"))
STEP_COLUMNS = tuple(f.name for f in _STORED)  # the columns of the steps table, besides its key ``id``


def _encode(f: dataclasses.Field[Any], value: Any) -> Any:
    return _ENCODE[f.metadata["array"]](value) if "array" in f.metadata else value


def _decode(f: dataclasses.Field[Any], value: Any) -> Any:
    if "array" not in f.metadata:
        return value
    decoded = _DECODE[f.metadata["array"]](value)
    return [] if decoded is None and f.default is dataclasses.MISSING else decoded  # a required array


def superseded_steps(steps: list[StepRecord]) -> dict[int, int]:
    """Superseded step index -> the retry that replaced it. A client that timed out and re-sent a call never
    saw the first answer: that step stays in the trace but is not part of the trajectory the agent followed."""
    return {old: s.index for s in steps for old in (s.retry_of or ())}


@dataclass(frozen=True)
class NewSession:
    """A session to create (:meth:`TraceStore.create_sessions`); ``session_id`` None: the store names it."""

    run_id: str | None = None
    task_id: str | None = None
    group_id: str | None = None
    metadata: dict[str, Any] | None = None
    policy_version: int = 0
    session_id: str | None = None
    key_hash: str | None = None  # the SHA-256 of the session's key


@dataclass(frozen=True)
class SessionEnd:
    """How a running session ends (:meth:`TraceStore.finish_sessions`); ``reward``: its outcome reward."""

    session_id: str
    status: str = "finished"
    reward: float | None = None
    error: str | None = None


@dataclass(slots=True)
class SessionRecord:
    id: str
    run_id: str | None = None
    task_id: str | None = None
    group_id: str | None = None
    status: str = "running"
    policy_version: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    created_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    reward: float | None = None  # sum of the session-level (outcome) rewards
    rewards: list[RewardRecord] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    n_steps: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def apply_rewards(self, rewards: Iterable[RewardRecord]) -> None:
        """Add ``rewards`` to this record as the store reads them back: appended to :attr:`rewards`,
        :attr:`reward` the sum of the session-level ones (None without any), each step's ``reward`` the sum
        of its own (None without any). The store builds every record it reads this way, and a writer that
        just stored ``rewards`` (:meth:`TraceStore.add_rewards`) gets the same record without reading it again."""
        self.rewards.extend(rewards)
        outcome = [r.value for r in self.rewards if r.step_index is None]
        self.reward = sum(outcome) if outcome else None
        per_step: dict[int, float] = {}
        for r in self.rewards:
            if r.step_index is not None:
                per_step[r.step_index] = per_step.get(r.step_index, 0.0) + r.value
        for step in self.steps:
            step.reward = per_step.get(step.index)
