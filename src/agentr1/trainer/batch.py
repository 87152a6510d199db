"""Batch builder: stored sessions and steps -> :class:`TrainRow` s, from the exact stored token ids.

Nothing here tokenizes: prompts, actions and feedback are the ids the gateway stored.

Layouts (``BatchConfig.layout``):

- ``per_step`` (the Agent-R1 layout): one row per step, prompt = ``observation_ids``,
  response = ``action_ids``.
- ``merged`` (prefix merging): consecutive steps of a trajectory share one row while each later
  step's ``observation_ids`` start with the row's whole sequence so far (prompt + response); the
  tokens between (tool results, the next user turn, chat-template glue) are feedback tokens with
  mask 0. A step starts a new row when its observation does not extend the row (a context policy
  rewrote or trimmed the history), when it is flagged ``drift``, when the previous step's action was
  truncated, when it is a branch (its ``parent_index`` is set and is not the step just before it)
  whose parent step is not the last step of a row. A forked session thus gets one row per branch:
  the fork's row starts at its own step (the shared steps before it are its prompt, trained once, in
  the branch that continues them), and a branch the agent returns to after calls on another keeps
  extending its own row.

Superseded steps (answers a client never saw because it timed out and retried; the retry's step
names them in ``retry_of``) are not part of the trajectory the agent followed: they are skipped
(``superseded_steps``) and the retry takes their place, continuing the same parent.

GiGPO anchors (``BatchConfig.anchor_fn``, default :func:`env_anchor`): the state the environment
named for a step (``agentr1.sdk.anchor`` / ``AgentEnv.anchor``), else a hash of the step's exact
observation ids (``steps_env_anchor`` counts the steps with an environment anchor).

Steps that are not trainable (e.g. a teacher behind litellm), have no action ids, or whose
logprobs do not match their action are skipped (counted). Their rewards are not lost: a skipped
step is treated as part of the environment, so its reward moves to the closest earlier kept step
of the session (the first later one if there is none), keeping the trajectory return intact.

Length (``max_length``, prompt + response): a merged row is exactly as long as its last step
alone (observation + action), so the limit applies per step, in both layouts. A step longer
than it is handled by ``truncation``: ``"split"`` keeps the
first tokens of the action that fit (its reward moves to the last kept token; if the observation
alone does not fit, the step is dropped), ``"drop"`` drops the step, ``"error"`` raises
:class:`RowTooLongError`. Every case is counted in ``Batch.metrics``.
"""

from __future__ import annotations

import hashlib
import math
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from agentr1.sdk import ANCHOR_PREFIX
from agentr1.store import SessionRecord, StepRecord, image_refs, superseded_steps
from agentr1.trainer.config import DEFAULT_LAYOUT, Layout
from agentr1.trainer.rewards import RewardConfig, SessionRewards, assemble_session_rewards
from agentr1.trainer.rows import Segment, TrainRow

__all__ = [
    "AnchorFn",
    "Batch",
    "BatchConfig",
    "RowTooLongError",
    "build_rows",
    "env_anchor",
    "metadata_anchor",
    "observation_anchor",
    "text_anchor",
]

Truncation = Literal["split", "drop", "error"]
AnchorFn = Callable[[SessionRecord, StepRecord], "str | None"]


class RowTooLongError(ValueError):
    """A step does not fit in ``max_length`` and ``truncation="error"``."""


def observation_anchor(observation_ids: Sequence[int]) -> str:
    """GiGPO anchor key of a step: a hash of its exact observation ids."""
    return "ids:" + hashlib.sha1(array("i", observation_ids).tobytes()).hexdigest()[:20]


def text_anchor(text: str) -> str:
    """GiGPO anchor key from an environment's observation text, whitespace-normalised."""
    return "text:" + hashlib.sha1(" ".join(text.split()).encode()).hexdigest()[:20]


def metadata_anchor(session: SessionRecord, step: StepRecord) -> str | None:
    """Anchor from ``session.metadata["anchors"][step index]`` (text the environment recorded), if any."""
    anchors = session.metadata.get("anchors") or {}
    text = anchors.get(str(step.index), anchors.get(step.index)) if isinstance(anchors, Mapping) else None
    return text_anchor(text) if isinstance(text, str) else None


def env_anchor(session: SessionRecord, step: StepRecord) -> str | None:
    """The anchor the environment named for this step (``agentr1.sdk.anchor``: a zero reward named
    ``anchor:<text>`` on the step), else ``session.metadata["anchors"]``, else None. Keys start with
    ``env:``, so metrics can tell them from observation hashes (``ids:``)."""
    named = [r.name[len(ANCHOR_PREFIX):] for r in session.rewards
             if r.step_index == step.index and r.name.startswith(ANCHOR_PREFIX)]
    if len(set(named)) > 1:
        raise ValueError(f"step {step.index} of session {session.id} has {len(set(named))} different anchors: "
                         f"{sorted(set(named))[:3]}")
    if named:
        return "env:" + named[0]
    from_metadata = metadata_anchor(session, step)
    return None if from_metadata is None else "env:" + from_metadata


@dataclass(slots=True)
class BatchConfig:
    layout: Layout = DEFAULT_LAYOUT
    max_length: int | None = None  # prompt + response tokens of one row
    truncation: Truncation = "split"
    skip_statuses: tuple[str, ...] = ("running",)  # sessions still being collected are not trained on
    # GiGPO anchors: the environment's (env_anchor); a None result (or anchor_fn None) = hash of observation ids
    anchor_fn: AnchorFn | None = env_anchor
    reward_config: RewardConfig | None = None  # used when build_rows is given no rewards

    def __post_init__(self) -> None:
        if self.layout not in ("per_step", "merged"):
            raise ValueError(f"layout must be 'per_step' or 'merged', got {self.layout!r}")
        if self.truncation not in ("split", "drop", "error"):
            raise ValueError(f"truncation must be 'split', 'drop' or 'error', got {self.truncation!r}")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"max_length must be at least 2, got {self.max_length}")


@dataclass(slots=True)
class Batch:
    rows: list[TrainRow]
    metrics: dict[str, int] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return sum(r.length for r in self.rows)


@dataclass(slots=True)
class _Step:
    """A step that made it into the batch, with its (possibly truncated) action."""

    record: StepRecord
    action: list[int]
    logprobs: list[float]
    has_logprobs: bool
    truncated: bool
    anchor: str
    reward: float = 0.0

    @property
    def observation(self) -> list[int]:
        return self.record.observation_ids


def build_rows(
    sessions: Iterable[SessionRecord],
    config: BatchConfig | None = None,
    *,
    rewards: Mapping[str, SessionRewards] | None = None,
) -> Batch:
    """Turn sessions (with their steps) into training rows.

    ``rewards`` are the per-step rewards from :func:`agentr1.trainer.rewards.assemble_rewards`;
    without them each session's rewards are assembled with ``config.reward_config`` (the session
    outcome on the last trainable step plus the stored step rewards).
    """
    cfg = config or BatchConfig()
    metrics: Counter[str] = Counter()
    rows: list[TrainRow] = []
    for session in sessions:
        metrics["sessions_in"] += 1
        if session.status in cfg.skip_statuses:
            metrics["sessions_skipped_status"] += 1
            continue
        if rewards is None:
            session_rewards = assemble_session_rewards(session, None, cfg.reward_config)
        elif session.id in rewards:
            session_rewards = rewards[session.id]
        else:
            raise KeyError(f"no rewards given for session {session.id}")
        built = _session_rows(session, session_rewards, cfg, metrics)
        if not built:
            metrics["sessions_without_rows"] += 1
        rows.extend(built)
    metrics["rows"] = len(rows)
    metrics["tokens"] = sum(r.length for r in rows)
    metrics["action_tokens"] = sum(sum(r.response_mask) for r in rows)
    return Batch(rows, dict(metrics))


def _session_rows(session: SessionRecord, rewards: SessionRewards, cfg: BatchConfig,
                  metrics: Counter[str]) -> list[TrainRow]:
    ordered = sorted(session.steps, key=lambda s: s.index)
    superseded = superseded_steps(ordered)
    metrics["superseded_steps"] += sum(s.index in superseded for s in ordered)
    prepared = [(s, None if s.index in superseded else _prepare(session, s, cfg, metrics)) for s in ordered]
    metrics["steps_in"] += len(ordered)
    kept = [st for _, st in prepared if st is not None]
    metrics["steps_used"] += len(kept)
    _place_rewards(prepared, kept, rewards, metrics)
    if not kept:
        return []
    followed = [s for s in ordered if s.index not in superseded]  # the trajectory the agent actually saw
    previous = {s.index: followed[i - 1].index if i else None for i, s in enumerate(followed)}
    groups = [[st] for st in kept] if cfg.layout == "per_step" else _merge(kept, previous, metrics)
    return [_row(session, group, rewards) for group in groups]


def _prepare(session: SessionRecord, step: StepRecord, cfg: BatchConfig, metrics: Counter[str]) -> _Step | None:
    if not step.trainable:
        metrics["steps_skipped_untrainable"] += 1
        return None
    if not step.action_ids:
        metrics["steps_skipped_empty_action"] += 1
        return None
    action = list(step.action_ids)
    if step.action_logprobs is None:
        metrics["steps_without_logprobs"] += 1
        logprobs, has_logprobs = [0.0] * len(action), False
    else:
        logprobs, has_logprobs = [float(x) for x in step.action_logprobs], True
        if len(logprobs) != len(action) or not all(math.isfinite(x) for x in logprobs):
            metrics["steps_skipped_bad_logprobs"] += 1
            return None
    truncated = False
    if cfg.max_length is not None:
        room = cfg.max_length - len(step.observation_ids)
        if room < len(action):
            if cfg.truncation == "error":
                raise RowTooLongError(
                    f"step {step.index} of session {session.id} has {len(step.observation_ids)} observation + "
                    f"{len(action)} action tokens, more than max_length={cfg.max_length}")
            if cfg.truncation == "drop" or room <= 0:
                metrics["steps_dropped_too_long"] += 1
                return None
            metrics["steps_action_truncated"] += 1
            metrics["tokens_truncated"] += len(action) - room
            action, logprobs, truncated = action[:room], logprobs[:room], True
    named = cfg.anchor_fn(session, step) if cfg.anchor_fn else None
    metrics["steps_env_anchor"] += named is not None
    anchor = named or observation_anchor(step.observation_ids)
    return _Step(step, action, logprobs, has_logprobs, truncated, anchor)


def _place_rewards(prepared: list[tuple[StepRecord, _Step | None]], kept: list[_Step],
                   rewards: SessionRewards, metrics: Counter[str]) -> None:
    """Each kept step gets its own reward; a skipped step's reward goes to the closest earlier kept step."""
    for position, (step, st) in enumerate(prepared):
        value = rewards.steps.get(step.index, 0.0)
        if st is not None:
            st.reward += value
            continue
        if value == 0.0:
            continue
        earlier = [s for _, s in prepared[:position] if s is not None]
        later = [s for _, s in prepared[position + 1:] if s is not None]
        target = earlier[-1] if earlier else (later[0] if later else None)
        if target is None:
            metrics["rewards_lost"] += 1
        else:
            target.reward += value
            metrics["rewards_relocated"] += 1


def _merge(kept: list[_Step], previous: dict[int, int | None], metrics: Counter[str]) -> list[list[_Step]]:
    groups: list[list[_Step]] = []
    fulls: list[list[int]] = []  # prompt + response of each row
    current = -1  # the row the last step joined
    for st in kept:
        at = current if current >= 0 else None
        parent = st.record.parent_index
        if at is not None and parent is not None and parent != previous[st.record.index]:
            # a branch: it may continue a row left open earlier (the agent went back to another branch)
            at = next((k for k, g in enumerate(groups) if g[-1].record.index == parent), None)
        reason = "first" if current < 0 else "drift" if st.record.drift else "branch" if at is None \
            else _break_reason(groups[at], fulls[at], st)
        if reason is None and at is not None:
            groups[at].append(st)
            fulls[at].extend(st.observation[len(fulls[at]):])
            fulls[at].extend(st.action)
            current = at
            continue
        if current >= 0:
            metrics[f"new_row_{reason}"] += 1
        groups.append([st])
        fulls.append([*st.observation, *st.action])
        current = len(groups) - 1
    return groups


def _break_reason(row: list[_Step], full: list[int], st: _Step) -> str | None:
    """Why ``st`` (not drift) cannot extend the row ``row`` (None if it can)."""
    if row[-1].truncated:
        return "truncated"
    obs = st.observation
    if len(obs) < len(full) or obs[: len(full)] != full:
        return "context_rewrite"
    return None


def _row(session: SessionRecord, steps: list[_Step], rewards: SessionRewards) -> TrainRow:
    prompt = list(steps[0].observation)
    response: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    token_rewards: list[float] = []
    segments: list[Segment] = []
    for st in steps:
        feedback = st.observation[len(prompt) + len(response):]
        response += feedback
        mask += [0] * len(feedback)
        logprobs += [0.0] * len(feedback)
        token_rewards += [0.0] * len(feedback)
        start = len(response)
        response += st.action
        mask += [1] * len(st.action)
        logprobs += st.logprobs
        token_rewards += [0.0] * (len(st.action) - 1) + [st.reward]
        segments.append(Segment(st.record.index, start, len(response)))
    return TrainRow(
        prompt_ids=prompt,
        response_ids=response,
        response_mask=mask,
        old_logprobs=logprobs,
        token_rewards=token_rewards,
        segments=segments,
        session_id=session.id,
        group_id=_group_of(session),
        task_id=session.task_id,
        policy_version=min(st.record.policy_version for st in steps),
        outcome_reward=rewards.outcome,
        anchor_keys=[st.anchor for st in steps],
        has_old_logprobs=all(st.has_logprobs for st in steps),
        # the row's sequence is its last step's observation + action: that step's images, in order
        images=tuple(image_refs(steps[-1].record.messages_seen)),
    )


def _group_of(session: SessionRecord) -> str:
    """The task group for group baselines: group id, else task id, else the session alone."""
    return session.group_id or (f"task:{session.task_id}" if session.task_id else f"session:{session.id}")

