"""Rows of stored steps: which steps of a session share one token sequence, token for token.

The one place that lays a session's steps out in rows; the trainer's batch builder (``agentr1.trainer.build_rows``)
trains on these rows and the viewer shows them, so what the viewer shows is what the trainer trains on.

Layouts:

- ``per_step`` (the Agent-R1 layout): one row per step, prompt = ``observation_ids``, response = ``action_ids``.
- ``merged`` (prefix merging): consecutive steps of a trajectory share one row while each later step's
  ``observation_ids`` start with the row's whole sequence so far (prompt + response); the tokens between (tool results,
  the next user turn, chat-template glue) are feedback tokens with mask 0. A step starts a new row when its observation
  does not extend the row (``context_rewrite``: a context policy rewrote or trimmed the history), when it is flagged
  ``drift``, when the previous step's action was ``truncated``, when it is a ``branch`` (its ``parent_index`` is set
  and is not the step just before it) whose parent step is not the last step of a row. A forked session thus gets one
  row per branch: the fork's row starts at its own step (the shared steps before it are its prompt), and a branch the
  agent returns to after calls on another keeps extending its own row. ``metrics["new_row_<reason>"]`` counts them.

Superseded steps (answers a client never saw because it timed out and retried; the retry's step names them in
``retry_of``) are not part of the trajectory the agent followed: they are left out and the retry takes their place.
Steps that are not trainable, have no action ids, or whose log-probabilities do not match their action are left out
too (counted). A step without log-probabilities is kept with zeros (``has_logprobs`` False).

Length (``max_length``, prompt + response): a merged row is exactly as long as its last step alone (observation +
action), so the limit applies per step, in both layouts. A longer step is handled by ``truncation``: ``split`` keeps
the first tokens of the action that fit (if the observation alone does not fit, the step is dropped), ``drop`` drops
the step, ``error`` raises :class:`RowTooLongError`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from agentr1.store.records import StepRecord, superseded_steps

__all__ = ["LAYOUTS", "TRUNCATIONS", "RowStep", "RowTooLongError", "Segment", "SessionRows", "TokenRow", "Truncation",
           "lay_out_rows"]

LAYOUTS = ("merged", "per_step")
TRUNCATIONS = ("split", "drop", "error")
Truncation = Literal["split", "drop", "error"]


class RowTooLongError(ValueError):
    """A step does not fit in ``max_length`` and ``truncation="error"``."""


@dataclass(slots=True)
class Segment:
    """Where one step's action sits in a row's response: ``response_ids[start:end]``."""

    step_index: int
    start: int
    end: int


@dataclass(slots=True)
class RowStep:
    """A step that made it into a row, with its action as the row has it (cut to the length limit if ``truncated``)."""

    record: StepRecord
    action: list[int]
    logprobs: list[float]  # zeros when the step has none (``has_logprobs`` False)
    has_logprobs: bool
    truncated: bool

    @property
    def observation(self) -> list[int]:
        return self.record.observation_ids


@dataclass(slots=True)
class TokenRow:
    """One token sequence: prompt = the first step's observation, response = its action, then for each later step
    the feedback tokens (mask 0, log-probability 0.0) and its action (mask 1, its log-probabilities)."""

    steps: list[RowStep]
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    old_logprobs: list[float] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)

    @classmethod
    def of(cls, steps: list[RowStep]) -> TokenRow:
        row = cls(steps, prompt_ids=list(steps[0].observation))
        for st in steps:
            feedback = st.observation[len(row.prompt_ids) + len(row.response_ids):]
            row.response_ids += feedback
            row.response_mask += [0] * len(feedback)
            row.old_logprobs += [0.0] * len(feedback)
            start = len(row.response_ids)
            row.response_ids += st.action
            row.response_mask += [1] * len(st.action)
            row.old_logprobs += st.logprobs
            row.segments.append(Segment(st.record.index, start, len(row.response_ids)))
        return row


@dataclass(slots=True)
class SessionRows:
    """A session's steps laid out: every step in index order with what became of it, and the rows."""

    steps: list[tuple[StepRecord, RowStep | None]]  # None: left out (superseded, untrainable, empty, too long ...)
    rows: list[TokenRow]

    @property
    def kept(self) -> list[RowStep]:
        return [st for _, st in self.steps if st is not None]


def lay_out_rows(steps: Iterable[StepRecord], layout: str = "merged", *, max_length: int | None = None,
                 truncation: Truncation = "split", metrics: Counter[str] | None = None) -> SessionRows:
    """The rows of one session's ``steps`` in ``layout`` (see the module docstring); ``metrics`` counts what was left
    out, cut, and why each new row began."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    counts: Counter[str] = Counter() if metrics is None else metrics
    ordered = sorted(steps, key=lambda s: s.index)
    superseded = superseded_steps(ordered)
    counts["superseded_steps"] += sum(s.index in superseded for s in ordered)
    laid = [(s, None if s.index in superseded else _row_step(s, max_length, truncation, counts)) for s in ordered]
    counts["steps_in"] += len(ordered)
    kept = [st for _, st in laid if st is not None]
    counts["steps_used"] += len(kept)
    followed = [s for s in ordered if s.index not in superseded]  # the trajectory the agent actually saw
    previous = {s.index: followed[i - 1].index if i else None for i, s in enumerate(followed)}
    groups = [[st] for st in kept] if layout == "per_step" else _merge(kept, previous, counts)
    return SessionRows(laid, [TokenRow.of(group) for group in groups])


def _row_step(step: StepRecord, max_length: int | None, truncation: Truncation,
              counts: Counter[str]) -> RowStep | None:
    if not step.trainable:
        counts["steps_skipped_untrainable"] += 1
        return None
    if not step.action_ids:
        counts["steps_skipped_empty_action"] += 1
        return None
    action = list(step.action_ids)
    if step.action_logprobs is None:
        counts["steps_without_logprobs"] += 1
        logprobs, has_logprobs = [0.0] * len(action), False
    else:
        logprobs, has_logprobs = [float(x) for x in step.action_logprobs], True
        if len(logprobs) != len(action) or not all(math.isfinite(x) for x in logprobs):
            counts["steps_skipped_bad_logprobs"] += 1
            return None
    truncated = False
    if max_length is not None:
        room = max_length - len(step.observation_ids)
        if room < len(action):
            if truncation == "error":
                raise RowTooLongError(
                    f"step {step.index} of session {step.session_id} has {len(step.observation_ids)} observation + "
                    f"{len(action)} action tokens, more than max_length={max_length}")
            if truncation == "drop" or room <= 0:
                counts["steps_dropped_too_long"] += 1
                return None
            counts["steps_action_truncated"] += 1
            counts["tokens_truncated"] += len(action) - room
            action, logprobs, truncated = action[:room], logprobs[:room], True
    return RowStep(step, action, logprobs, has_logprobs, truncated)


def _merge(kept: list[RowStep], previous: dict[int, int | None], counts: Counter[str]) -> list[list[RowStep]]:
    groups: list[list[RowStep]] = []
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
            counts[f"new_row_{reason}"] += 1
        groups.append([st])
        fulls.append([*st.observation, *st.action])
        current = len(groups) - 1
    return groups


def _break_reason(row: list[RowStep], full: list[int], st: RowStep) -> str | None:
    """Why ``st`` (not drift) cannot extend the row ``row`` (None if it can)."""
    if row[-1].truncated:
        return "truncated"
    obs = st.observation
    if len(obs) < len(full) or obs[: len(full)] != full:
        return "context_rewrite"
    return None
