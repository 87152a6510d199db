"""Rows <-> trajectory tensors: the form every advantage estimator here computes on.

A trajectory (one session) may be spread over several rows (one per step, or several merged
rows). Estimators see one tensor row per trajectory holding its action tokens only, in step
order: ``token_level_rewards``, ``response_mask`` (1 on every real token), optional ``values``,
``step_ids`` (the step's ordinal within the trajectory, -1 on padding) and ``index`` (the task
group of each trajectory). Every action token of the batch appears exactly once, so
token-weighted statistics (verl's ``masked_whiten``) are the same as on the rows themselves, and
the result does not depend on the layout: ``per_step`` and ``merged`` rows get identical
advantages. Feedback tokens (mask 0) are skipped by verl's recursions anyway; here they are
simply absent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from agentr1.trainer.rows import TrainRow

__all__ = ["TrajectoryBatch", "gather_trajectories", "scatter_advantages"]


@dataclass(slots=True)
class TrajectoryBatch:
    session_ids: list[str]
    index: np.ndarray  # (T,) object: task group of each trajectory
    token_level_rewards: torch.Tensor  # (T, L) float64
    response_mask: torch.Tensor  # (T, L) float64
    step_ids: torch.Tensor  # (T, L) int64, -1 on padding
    values: torch.Tensor | None  # (T, L) float64, when every row carries values
    anchors: list[list[str | None]]  # per trajectory, per step ordinal: GiGPO anchor key
    positions: list[list[tuple[int, int]]]  # per trajectory, per token: (row number, response position)

    @property
    def num_tokens(self) -> int:
        return int(self.response_mask.sum().item())

    @property
    def num_steps(self) -> int:
        return sum(len(a) for a in self.anchors)


def gather_trajectories(rows: list[TrainRow], *, need_values: bool = False) -> TrajectoryBatch:
    """Collect each session's action tokens from ``rows`` into one padded tensor row per trajectory."""
    by_session: dict[str, list[tuple[int, int, int, int]]] = {}  # session -> (step index, start, row, segment)
    group_of: dict[str, str] = {}
    for r, row in enumerate(rows):
        _check_row(row, need_values)
        if group_of.setdefault(row.session_id, row.group_id) != row.group_id:
            raise ValueError(f"rows of session {row.session_id} disagree on group_id: "
                             f"{group_of[row.session_id]!r} vs {row.group_id!r}")
        segments = by_session.setdefault(row.session_id, [])
        segments.extend((seg.step_index, seg.start, r, k) for k, seg in enumerate(row.segments))

    session_ids: list[str] = []
    positions: list[list[tuple[int, int]]] = []
    rewards: list[list[float]] = []
    values: list[list[float]] = []
    steps: list[list[int]] = []
    anchors: list[list[str | None]] = []
    for session_id, segments in by_session.items():
        pos: list[tuple[int, int]] = []
        rew: list[float] = []
        val: list[float] = []
        sid: list[int] = []
        anc: list[str | None] = []
        ordinal: dict[int, int] = {}
        for step_index, _, r, k in sorted(segments):
            row, seg = rows[r], rows[r].segments[k]
            tokens = [p for p in range(seg.start, seg.end) if row.response_mask[p]]
            if not tokens:
                continue
            if step_index not in ordinal:
                ordinal[step_index] = len(ordinal)
                anc.append(row.anchor_keys[k] if len(row.anchor_keys) == len(row.segments) else None)
            pos += [(r, p) for p in tokens]
            rew += [row.token_rewards[p] for p in tokens]
            if need_values:
                val += [row.values[p] for p in tokens]
            sid += [ordinal[step_index]] * len(tokens)
        if pos:
            session_ids.append(session_id)
            positions.append(pos)
            rewards.append(rew)
            values.append(val)
            steps.append(sid)
            anchors.append(anc)

    width = max((len(p) for p in positions), default=0)
    count = len(positions)
    reward_t = torch.zeros(count, width, dtype=torch.float64)
    mask_t = torch.zeros(count, width, dtype=torch.float64)
    step_t = torch.full((count, width), -1, dtype=torch.int64)
    value_t = torch.zeros(count, width, dtype=torch.float64) if need_values else None
    for t, pos in enumerate(positions):
        n = len(pos)
        reward_t[t, :n] = torch.tensor(rewards[t], dtype=torch.float64)
        mask_t[t, :n] = 1.0
        step_t[t, :n] = torch.tensor(steps[t], dtype=torch.int64)
        if value_t is not None:
            value_t[t, :n] = torch.tensor(values[t], dtype=torch.float64)
    index = np.array([group_of[s] for s in session_ids], dtype=object)
    return TrajectoryBatch(session_ids, index, reward_t, mask_t, step_t, value_t, anchors, positions)


def _check_row(row: TrainRow, need_values: bool) -> None:
    n = len(row.response_ids)
    if len(row.response_mask) != n or len(row.token_rewards) != n:
        raise ValueError(f"row of session {row.session_id}: response_mask and token_rewards must have "
                         f"{n} entries (one per response token)")
    covered = [False] * n
    for seg in row.segments:
        if not 0 <= seg.start <= seg.end <= n:
            raise ValueError(f"row of session {row.session_id}: segment {seg} is outside the response ({n} tokens)")
        covered[seg.start:seg.end] = [True] * (seg.end - seg.start)
    for p in range(n):
        if row.token_rewards[p] and not (row.response_mask[p] and covered[p]):
            raise ValueError(f"row of session {row.session_id}: reward {row.token_rewards[p]} at response "
                             f"position {p}, which is not an action token of a segment")
    if need_values and len(row.values) != n:
        raise ValueError(f"row of session {row.session_id} has {len(row.values)} values for {n} response tokens; "
                         "this estimator needs critic values on every row (TrainRow.values, response-aligned)")


def scatter_advantages(rows: list[TrainRow], batch: TrajectoryBatch, advantages: torch.Tensor,
                       returns: torch.Tensor) -> None:
    """Write trajectory-tensor results back to the rows (0 on every non-action token)."""
    for row in rows:
        row.advantages = [0.0] * len(row.response_ids)
        row.returns = [0.0] * len(row.response_ids)
    adv = advantages.detach().to(torch.float64).tolist()
    ret = returns.detach().to(torch.float64).tolist()
    for t, pos in enumerate(batch.positions):
        for j, (r, p) in enumerate(pos):
            rows[r].advantages[p] = adv[t][j]
            rows[r].returns[p] = ret[t][j]
