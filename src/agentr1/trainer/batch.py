"""Batch builder: stored sessions and steps -> :class:`TrainRow` s, from the exact stored token ids.

Nothing here tokenizes: prompts, actions and feedback are the ids the gateway stored. Which steps share a row, and
the row's tokens, masks and log-probabilities, are the store's one row layout (:func:`agentr1.store.lay_out_rows`;
its docstring has the rules): ``BatchConfig.layout`` (``per_step``, the Agent-R1 layout, or ``merged``, prefix
merging), ``max_length`` and ``truncation``; superseded, untrainable and empty steps and steps with bad logprobs are
left out there (counted in ``Batch.metrics``). The viewer shows the same rows. This module adds what training needs:

Sessions still ``running`` (``BatchConfig.skip_statuses``) are not trained on.

Rewards: a left-out step's reward is not lost: it is treated as part of the environment, so its reward moves to the
closest earlier kept step of the session (the first later one if there is none), keeping the trajectory return
intact; each step's reward sits on its last (kept) action token.

GiGPO anchors (``BatchConfig.anchor_fn``, default :func:`env_anchor`): the state the environment
named for a step (``agentr1.sdk.anchor`` / ``AgentEnv.anchor``), else a hash of the step's exact
observation ids (``steps_env_anchor`` counts the steps with an environment anchor).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from agentr1.sdk import ANCHOR_PREFIX
from agentr1.store import (
    TRUNCATIONS,
    RowStep,
    RowTooLongError,
    SessionRecord,
    StepRecord,
    TokenRow,
    Truncation,
    image_refs,
    lay_out_rows,
)
from agentr1.trainer.config import DEFAULT_LAYOUT, Layout
from agentr1.trainer.rewards import RewardConfig, SessionRewards, assemble_session_rewards
from agentr1.trainer.rows import TrainRow

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

AnchorFn = Callable[[SessionRecord, StepRecord], "str | None"]


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
        if self.truncation not in TRUNCATIONS:
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
    laid = lay_out_rows(session.steps, cfg.layout, max_length=cfg.max_length, truncation=cfg.truncation,
                        metrics=metrics)
    kept = laid.kept
    step_rewards = _place_rewards(laid.steps, rewards, metrics)
    if not kept:
        return []
    anchors = {st.record.index: _anchor(session, st.record, cfg, metrics) for st in kept}
    return [_train_row(session, row, rewards, step_rewards, anchors) for row in laid.rows]


def _anchor(session: SessionRecord, step: StepRecord, cfg: BatchConfig, metrics: Counter[str]) -> str:
    named = cfg.anchor_fn(session, step) if cfg.anchor_fn else None
    metrics["steps_env_anchor"] += named is not None
    return named or observation_anchor(step.observation_ids)


def _place_rewards(laid: list[tuple[StepRecord, RowStep | None]], rewards: SessionRewards,
                   metrics: Counter[str]) -> dict[int, float]:
    """Each kept step's reward (by step index): its own, plus those of left-out steps whose closest earlier kept step
    it is (or, with none earlier, the closest later one)."""
    placed = {st.record.index: 0.0 for _, st in laid if st is not None}
    for position, (step, st) in enumerate(laid):
        value = rewards.steps.get(step.index, 0.0)
        if st is not None:
            placed[step.index] += value
            continue
        if value == 0.0:
            continue
        earlier = [s for _, s in laid[:position] if s is not None]
        later = [s for _, s in laid[position + 1:] if s is not None]
        target = earlier[-1] if earlier else (later[0] if later else None)
        if target is None:
            metrics["rewards_lost"] += 1
        else:
            placed[target.record.index] += value
            metrics["rewards_relocated"] += 1
    return placed


def _train_row(session: SessionRecord, row: TokenRow, rewards: SessionRewards, step_rewards: Mapping[int, float],
               anchors: Mapping[int, str]) -> TrainRow:
    token_rewards = [0.0] * len(row.response_ids)
    for segment in row.segments:
        token_rewards[segment.end - 1] = step_rewards[segment.step_index]
    steps = row.steps
    return TrainRow(
        prompt_ids=row.prompt_ids,
        response_ids=row.response_ids,
        response_mask=row.response_mask,
        old_logprobs=row.old_logprobs,
        token_rewards=token_rewards,
        segments=row.segments,
        session_id=session.id,
        group_id=_group_of(session),
        task_id=session.task_id,
        policy_version=min(st.record.policy_version for st in steps),
        outcome_reward=rewards.outcome,
        anchor_keys=[anchors[st.record.index] for st in steps],
        has_old_logprobs=all(st.has_logprobs for st in steps),
        # the row's sequence is its last step's observation + action: that step's images, in order
        images=tuple(image_refs(steps[-1].record.messages_seen)),
    )


def _group_of(session: SessionRecord) -> str:
    """The task group for group baselines: group id, else task id, else the session alone."""
    return session.group_id or (f"task:{session.task_id}" if session.task_id else f"session:{session.id}")
