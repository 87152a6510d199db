"""Plain records that the store API takes and returns (no ORM objects leak out)."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import Any


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
    observation_ids: list[int]
    action_ids: list[int]
    action_logprobs: list[float] | None = None
    messages_sent: list[Any] = field(default_factory=list)
    messages_seen: list[Any] = field(default_factory=list)
    tools: list[Any] | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    action: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    feedback_messages: list[Any] | None = None
    feedback_ids: list[int] | None = None
    policy_version: int = 0
    backend: str = ""
    model: str = ""
    trainable: bool = True
    parent_index: int | None = None
    drift: bool = False
    retry_of: list[int] | None = None  # a client retry: the earlier answered-but-unseen attempts it replaced
    latency_ms: float | None = None
    created_at: dt.datetime | None = None
    reward: float | None = None  # sum of the rewards given to this step (read side only)
    superseded_by: int | None = None  # read side only: the retry that replaced this (unseen) answer

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def superseded_steps(steps: list[StepRecord]) -> dict[int, int]:
    """Superseded step index -> the retry that replaced it. A client that timed out and re-sent a call never
    saw the first answer: that step stays in the trace but is not part of the trajectory the agent followed."""
    return {old: s.index for s in steps for old in (s.retry_of or ())}


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
