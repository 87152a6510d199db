"""Typed bodies of the viewer's JSON API (``/api/...``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import typing
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field, create_model

from agentr1.store import StepRecord

T = TypeVar("T")

SortKey = Literal["created", "reward", "steps"]
Order = Literal["asc", "desc"]
TokenKind = Literal["prompt", "feedback", "action"]


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int


class RunSummary(BaseModel):
    id: str
    name: str = ""
    created_at: dt.datetime | None = None
    n_sessions: int = 0
    n_steps: int = 0
    mean_reward: float | None = None


class PolicyVersionCount(BaseModel):
    version: int
    sessions: int
    steps: int


class GroupSummary(BaseModel):
    group_id: str
    task_id: str | None = None
    n: int
    mean_reward: float | None = None
    min_reward: float | None = None
    max_reward: float | None = None


class RunDetail(BaseModel):
    run: RunSummary
    config: dict[str, Any] = Field(default_factory=dict)
    status_counts: dict[str, int] = Field(default_factory=dict)
    policy_versions: list[PolicyVersionCount] = Field(default_factory=list)
    out_dir: str | None = None  # the trainer's output folder matched to this run (with --runs-dir)
    matched_by: str | None = None  # "run_id" or "run_name"


class MetricsSeries(BaseModel):
    run_id: str
    out_dir: str | None = None
    keys: list[str] = Field(default_factory=list)
    points: list[dict[str, Any]] = Field(default_factory=list)  # metrics.jsonl records, in step order


class SessionSummary(BaseModel):
    id: str
    run_id: str | None = None
    task_id: str | None = None
    group_id: str | None = None
    status: str
    policy_version: int = 0
    reward: float | None = None
    n_steps: int = 0
    created_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    error: str | None = None


class Token(BaseModel):
    id: int
    text: str | None = None  # the token decoded alone (None without a tokenizer)
    logprob: float | None = None
    mask: int = 0  # the trainer's response mask: 1 on sampled tokens
    step: int | None = None  # the step whose action (or feedback) this token is
    kind: TokenKind = "action"


class RewardView(BaseModel):
    name: str
    value: float
    step_index: int | None = None
    source: str


# the step's own fields shown by the viewer: types and defaults come from agentr1.store.StepRecord
SHOWN_STEP_FIELDS = ("index", "parent_index", "policy_version", "model", "backend", "trainable", "finish_reason",
                     "drift", "latency_ms", "reward", "sampling", "tools", "messages_sent", "messages_seen", "action",
                     "feedback_messages")


def _record_fields(names: tuple[str, ...]) -> dict[str, Any]:
    hints = typing.get_type_hints(StepRecord)
    fields = {f.name: f for f in dataclasses.fields(StepRecord)}
    return {name: (hints[name], Field(default_factory=fields[name].default_factory)
                   if fields[name].default_factory is not dataclasses.MISSING
                   else fields[name].default if fields[name].default is not dataclasses.MISSING else ...)
            for name in names}


StepFields = create_model("StepFields", **_record_fields(SHOWN_STEP_FIELDS))  # type: ignore[call-overload]


def step_fields(step: StepRecord) -> dict[str, Any]:
    """The shown fields of a stored step, as :class:`StepView` takes them."""
    return {name: getattr(step, name) for name in SHOWN_STEP_FIELDS}


class StepView(StepFields):  # type: ignore[misc, valid-type]
    """A step as the viewer's API shows it: its own fields (:data:`SHOWN_STEP_FIELDS`) and what the
    viewer computes from them."""

    seen_differs: bool = False  # the context policy changed what the model saw
    seen_diff: list[int] = Field(default_factory=list)  # positions in messages_seen the agent did not send
    n_dropped: int = 0  # sent messages the model did not see
    action: dict[str, Any] = Field(default_factory=dict)
    feedback_messages: list[Any] | None = None
    n_observation: int = 0
    n_new_observation: int = 0  # observation tokens not in the previous step's observation + action
    n_feedback: int | None = None
    extends_previous: bool | None = None  # the observation starts with the compared step's tokens
    compared_to: int | None = None  # that step: the parent step, else the step before
    branch: int | None = None  # the branch the step belongs to (None: a client retry superseded it)
    children: list[int] = Field(default_factory=list)  # the steps continuing this one (more than one: a fork)
    action_tokens: list[Token] = Field(default_factory=list)


class BranchView(BaseModel):
    """One branch of a session: a line of steps each continuing the previous token for token."""

    id: int
    kind: Literal["root", "fork", "drift"]  # a new conversation, a fork of an earlier step, a re-rendered history
    parent_step: int | None = None  # the step it continues (None for a root)
    parent_branch: int | None = None  # the branch holding parent_step
    steps: list[int]  # its own steps, in order
    path: list[int]  # every step up to its last one: the shared steps of its ancestors, then its own
    children: list[int] = Field(default_factory=list)  # branches forking from one of its steps


class SessionDetail(BaseModel):
    session: SessionSummary
    metadata: dict[str, Any] = Field(default_factory=dict)
    rewards: list[RewardView] = Field(default_factory=list)
    steps: list[StepView] = Field(default_factory=list)
    branches: list[BranchView] = Field(default_factory=list)
    superseded_steps: list[int] = Field(default_factory=list)  # answers the client never saw (it retried)
    tokenizer: str | None = None


class RowView(BaseModel):
    steps: list[int]
    prompt_len: int
    n_tokens: int
    n_action: int
    tokens: list[Token]


class RowsView(BaseModel):
    session_id: str
    layout: Literal["merged", "per_step"]
    source: Literal["trainer"] = "trainer"  # the trainer's rows: the store's one row layout (agentr1.store.lay_out_rows)
    rows: list[RowView]
    metrics: dict[str, int] = Field(default_factory=dict)
    tokenizer: str | None = None


class GroupSample(BaseModel):
    session: SessionSummary
    trained: bool  # the trainer would train on it (finished, with trainable steps)
    trajectory_return: float | None = None
    advantage: float | None = None  # mean over its action tokens
    step_advantages: dict[int, float] = Field(default_factory=dict)
    final_answer: str | None = None


class GroupView(BaseModel):
    group_id: str
    run_id: str | None = None
    estimator: str
    estimators: list[str] = Field(default_factory=list)
    advantages: bool = False  # False: the trainer extra is missing or the estimator failed (see note)
    note: str | None = None
    samples: list[GroupSample]


class ViewerConfig(BaseModel):
    gateway_url: str | None = None
    tokenizer: str | None = None
    runs_dir: str | None = None
    model: str | None = None
    estimator: str = "grpo"


class ChatSessionCreate(BaseModel):
    run_id: str = "chat"


class ChatSessionOut(BaseModel):
    id: str
    api_key: str | None = None
    link: str


class ChatTurnIn(BaseModel):
    session_id: str
    api_key: str | None = None
    messages: list[dict[str, Any]]
    tools: list[str] = Field(default_factory=list)
    model: str | None = None
    max_tokens: int = 256
    temperature: float = 0.7


class ChatTurnOut(BaseModel):
    session_id: str
    messages: list[dict[str, Any]]  # what the turn added: assistant replies and tool results
    steps: list[int]
