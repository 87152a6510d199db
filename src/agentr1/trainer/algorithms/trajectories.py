"""The padded batch <-> trajectory tensors: the form every advantage estimator here computes on.

A trajectory (one session) may be spread over several rows (one per step, or several merged
rows). Estimators see one tensor row per trajectory holding its action tokens only, in step
order: ``token_level_rewards``, ``response_mask`` (1 on every real token), optional ``values``,
``step_ids`` (the step's ordinal within the trajectory, -1 on padding) and ``index`` (the task
group of each trajectory). Every action token of the batch appears exactly once, so
token-weighted statistics (verl's ``masked_whiten``) are the same as on the rows themselves, and
the result does not depend on the layout: ``per_step`` and ``merged`` rows get identical
advantages. Feedback tokens (mask 0) are skipped by verl's recursions anyway; here they are
simply absent.

Both directions are index operations on the :class:`~agentr1.trainer.padded.PaddedBatch`'s tensors:
``source`` holds, for each trajectory token, where it sits in the batch (row * R + response position).
Only the segments (a few per session) are walked in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from agentr1.trainer.padded import PaddedBatch
from agentr1.trainer.rows import TrainRow

__all__ = ["TrajectoryBatch", "gather_trajectories", "scatter_advantages"]


@dataclass(slots=True)
class TrajectoryBatch:
    session_ids: list[str]
    index: np.ndarray  # (T,) object: task group of each trajectory
    token_level_rewards: torch.Tensor  # (T, L) float64
    response_mask: torch.Tensor  # (T, L) float64
    step_ids: torch.Tensor  # (T, L) int64, -1 on padding
    values: torch.Tensor | None  # (T, L) float64, when the estimator needs them
    anchors: list[list[str | None]]  # per trajectory, per step ordinal: GiGPO anchor key
    source: torch.Tensor  # (T, L) int64: the token's place in the padded batch, row * R + position; -1 on padding

    @property
    def num_tokens(self) -> int:
        return int(self.response_mask.sum().item())

    @property
    def num_steps(self) -> int:
        return sum(len(a) for a in self.anchors)

    @classmethod
    def empty(cls) -> TrajectoryBatch:
        none = torch.zeros(0, 0, dtype=torch.float64)
        return cls([], np.array([], dtype=object), none, none.clone(), torch.zeros(0, 0, dtype=torch.int64), None,
                   [], torch.zeros(0, 0, dtype=torch.int64))


def gather_trajectories(batch: PaddedBatch, *, need_values: bool = False) -> TrajectoryBatch:
    """Collect each session's action tokens from ``batch`` into one padded tensor row per trajectory."""
    rows = batch.rows
    by_session: dict[str, list[tuple[int, int, int, int]]] = {}  # session -> (step index, start, row, segment)
    group_of: dict[str, str] = {}
    for r, row in enumerate(rows):
        _check_segments(row)
        if group_of.setdefault(row.session_id, row.group_id) != row.group_id:
            raise ValueError(f"rows of session {row.session_id} disagree on group_id: "
                             f"{group_of[row.session_id]!r} vs {row.group_id!r}")
        segments = by_session.setdefault(row.session_id, [])
        segments.extend((seg.step_index, seg.start, r, k) for k, seg in enumerate(row.segments))
    # every segment, each session's in step order
    walk = [(session_id, step_index, r, k) for session_id, segments in by_session.items()
            for step_index, _, r, k in sorted(segments)]
    seg_row = torch.tensor([r for _, _, r, _ in walk], dtype=torch.long)
    seg_start = torch.tensor([rows[r].segments[k].start for _, _, r, k in walk], dtype=torch.long)
    seg_end = torch.tensor([rows[r].segments[k].end for _, _, r, k in walk], dtype=torch.long)
    action = batch.response_mask != 0
    rewards = batch.extra["token_rewards"]
    _check_rewards_on_actions(batch, action, rewards, seg_row, seg_start, seg_end)
    values = _values(batch) if need_values else None

    # a trajectory per session with action tokens; a step ordinal per step with action tokens
    action_before = torch.nn.functional.pad(action.long().cumsum(dim=1), (1, 0))  # (B, R + 1)
    held = (action_before[seg_row, seg_end] - action_before[seg_row, seg_start]).tolist()
    session_ids: list[str] = []
    anchors: list[list[str | None]] = []
    seg_trajectory: list[int] = []  # -1: a segment without action tokens
    seg_step: list[int] = []
    current: str | None = None
    ordinal: dict[int, int] = {}  # step index -> its ordinal in the current session
    for (session_id, step_index, r, k), tokens in zip(walk, held, strict=True):
        if session_id != current:
            current, ordinal = session_id, {}
        if not tokens:
            seg_trajectory.append(-1)
            seg_step.append(-1)
            continue
        if not ordinal:
            session_ids.append(session_id)
            anchors.append([])
        if step_index not in ordinal:
            ordinal[step_index] = len(ordinal)
            row = rows[r]
            anchors[-1].append(row.anchor_keys[k] if len(row.anchor_keys) == len(row.segments) else None)
        seg_trajectory.append(len(session_ids) - 1)
        seg_step.append(ordinal[step_index])

    # every token of every segment, in walk order; then the action tokens, numbered within their trajectory
    lengths = seg_end - seg_start
    seg_of = torch.repeat_interleave(torch.arange(len(walk)), lengths)
    token_row = seg_row[seg_of]
    token_pos = seg_start[seg_of] + torch.arange(len(seg_of)) - (lengths.cumsum(0) - lengths)[seg_of]
    token_trajectory = torch.tensor(seg_trajectory, dtype=torch.long)[seg_of]
    keep = (token_trajectory >= 0) & action[token_row, token_pos]
    token_row, token_pos, token_trajectory = token_row[keep], token_pos[keep], token_trajectory[keep]
    token_step = torch.tensor(seg_step, dtype=torch.long)[seg_of][keep]
    counts = torch.bincount(token_trajectory, minlength=len(session_ids))
    column = torch.arange(len(token_trajectory)) - (counts.cumsum(0) - counts)[token_trajectory]

    shape = (len(session_ids), int(counts.max()) if session_ids else 0)
    at = (token_trajectory, column)
    reward_t = torch.zeros(shape, dtype=torch.float64)
    reward_t[at] = rewards[token_row, token_pos].double()
    mask_t = torch.zeros(shape, dtype=torch.float64)
    mask_t[at] = 1.0
    step_t = torch.full(shape, -1, dtype=torch.int64)
    step_t[at] = token_step
    source_t = torch.full(shape, -1, dtype=torch.int64)
    source_t[at] = token_row * action.shape[1] + token_pos
    value_t = None
    if values is not None:
        value_t = torch.zeros(shape, dtype=torch.float64)
        value_t[at] = values[token_row, token_pos].double()
    index = np.array([group_of[s] for s in session_ids], dtype=object)
    return TrajectoryBatch(session_ids, index, reward_t, mask_t, step_t, value_t, anchors, source_t)


def _check_segments(row: TrainRow) -> None:
    n = len(row.response_ids)
    for seg in row.segments:
        if not 0 <= seg.start <= seg.end <= n:
            raise ValueError(f"row of session {row.session_id}: segment {seg} is outside the response ({n} tokens)")


def _check_rewards_on_actions(batch: PaddedBatch, action: torch.Tensor, rewards: torch.Tensor, seg_row: torch.Tensor,
                              seg_start: torch.Tensor, seg_end: torch.Tensor) -> None:
    """A reward sits on an action token of a segment, or nowhere."""
    edges = torch.zeros(len(batch), action.shape[1] + 1, dtype=torch.long)
    ones = torch.ones_like(seg_row)
    edges.index_put_((seg_row, seg_start), ones, accumulate=True)
    edges.index_put_((seg_row, seg_end), -ones, accumulate=True)
    covered = edges.cumsum(dim=1)[:, :-1] > 0
    stray = (rewards != 0) & ~(action & covered)
    if bool(stray.any()):
        r, p = (int(i) for i in stray.nonzero()[0])
        row = batch.rows[r]
        raise ValueError(f"row of session {row.session_id}: reward {row.token_rewards[p]} at response "
                         f"position {p}, which is not an action token of a segment")


def _values(batch: PaddedBatch) -> torch.Tensor:
    if "values" in batch.extra:
        return batch.extra["values"]
    row = next((r for r in batch.rows if len(r.values) != len(r.response_ids)), None)
    where = ("the batch has no critic values" if row is None else
             f"row of session {row.session_id} has {len(row.values)} values for {len(row.response_ids)} response "
             "tokens")
    raise ValueError(f"{where}; this estimator needs critic values on every row (TrainRow.values, response-aligned)")


def scatter_advantages(batch: PaddedBatch, trajectories: TrajectoryBatch, advantages: torch.Tensor,
                       returns: torch.Tensor) -> None:
    """Trajectory-tensor results into ``batch.extra["advantages"]`` and ``["returns"]`` (float64, 0 on every
    non-action token)."""
    placed = trajectories.source >= 0
    for key, result in (("advantages", advantages), ("returns", returns)):
        out = torch.zeros(batch.response_mask.shape, dtype=torch.float64)
        out.view(-1)[trajectories.source[placed]] = result.detach().to(torch.float64)[placed]
        batch.extra[key] = out
