"""The forwards that prefill an admission, planned up front, and their layout as flat prefills.

An admission's new prompt tokens go through the model in forwards over left-padded segments (``batch.py``: in exact
mode one chunk of :data:`~.prefix.CHUNK` queries per row and forward, rows grouped by chunk, so that a chunk's keys
and values are the same bits however the prompt reached it). :func:`plan_forwards` plans them all: each forward's
segments, the leaders among them that are computed (rows admitted together share identical segments,
:func:`~.prefix.share_segments`) and the leader each segment reads. The model's forward runs them one by one.

:func:`flat_layout` lays consecutive planned forwards out for :meth:`~.flat_forward.FlatForward.prefill`: all their
leaders' real tokens as one flat batch whose products run together, and per planned forward the padded layout its
attention had in its own forward (the same shape over the same keys, so the same bits). A decoder layer's keys and
values depend only on that layer's input, so one pass over the layers computes the chunks of a prompt that the
model's forward needed one pass each for: a row admitted with 60 new tokens reads the weights once, not four times.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .flat_forward import AttentionGroup, FlatPrefill, SharedColumns
from .prefix import CHUNK, Segment, share_segments
from .rows import Row
from .slots import round_up

__all__ = ["PlannedForward", "flat_layout", "forward_shape", "padded_segments", "passes", "plan_forwards",
           "shared_columns"]

ROW_MULTIPLE = 16  # a flat prefill's products run over a multiple of this many rows, as a padded forward's did


@dataclass(frozen=True)
class PlannedForward:
    """One forward of an admission: its ``segments``, the ``leaders`` computed and, per segment, its leader's index."""

    segments: list[Segment]
    leaders: list[Segment]
    lead: list[int]

    @property
    def finished(self) -> list[int]:
        """The segments that end their row's prompt (their rows sample a first token from this forward)."""
        return [i for i, (row, _, end) in enumerate(self.segments) if end == len(row.prompt_ids)]

    @property
    def shared(self) -> bool:
        return len(self.leaders) < len(self.segments)

    @property
    def logit_rows(self) -> list[int] | None:
        """The leader each segment reads when this forward's logits are read per segment (finished rows that shared
        a segment), else None: one row of logits per leader."""
        return self.lead if self.finished and self.shared else None

    @property
    def tokens(self) -> int:
        return sum(end - start for _, start, end in self.leaders)


def plan_forwards(rows: list[Row], *, exact: bool, budget: int, prefix_cache: bool) -> list[PlannedForward]:
    """Every forward that prefills ``rows`` from their cached prefixes (``row.cached``), in order."""
    cursor = {id(r): r.cached for r in rows}
    forwards = []
    pending = list(rows)
    while pending:
        for segments in _next_forwards(pending, cursor, exact, budget):
            leaders, lead = segments, list(range(len(segments)))
            if prefix_cache:  # rows admitted together compute a common span once
                leaders, lead = share_segments(segments)
            forwards.append(PlannedForward(segments, leaders, lead))
            for row, _, end in segments:
                cursor[id(row)] = end
        pending = [r for r in pending if cursor[id(r)] < len(r.prompt_ids)]
    return forwards


def _next_forwards(rows: list[Row], cursor: dict[int, int], exact: bool, budget: int) -> list[list[Segment]]:
    """The next forwards from the rows' cursors: lists of (row, start, end) segments of the prompts."""
    if exact:  # one chunk per row, rows grouped by chunk
        groups: dict[int, list[Segment]] = {}
        for row in rows:
            start = cursor[id(row)]
            end = min(len(row.prompt_ids), (start // CHUNK + 1) * CHUNK)
            groups.setdefault(start // CHUNK, []).append((row, start, end))
        return [groups[k] for k in sorted(groups)]
    per_row = max(CHUNK, (budget // len(rows)) // CHUNK * CHUNK)
    segments = []
    for row in rows:
        start = cursor[id(row)]
        segments.append((row, start, min(len(row.prompt_ids), (start // CHUNK) * CHUNK + per_row)))
    return [segments]


def passes(forwards: list[PlannedForward], budget: int) -> list[list[PlannedForward]]:
    """``forwards`` in consecutive runs of at most ``budget`` computed tokens (a longer forward alone)."""
    out: list[list[PlannedForward]] = []
    tokens = 0
    for forward in forwards:
        if out and tokens + forward.tokens <= budget:
            out[-1].append(forward)
            tokens += forward.tokens
        else:
            out.append([forward])
            tokens = forward.tokens
    return out


def forward_shape(leaders: list[Segment], *, exact: bool, length_step: int, scratch: int) -> tuple[int, int]:
    """The queries per row and the attended length of a forward over ``leaders``."""
    top = max(end for _, _, end in leaders)
    if exact:
        return CHUNK, round_up(top, CHUNK)
    return max(end - start for _, start, end in leaders), min(round_up(top, length_step), scratch)


def padded_segments(leaders: list[Segment], width: int, pad_id: int,
                    scratch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ids, positions and cache columns ``[rows, width]`` of ``leaders`` left-padded to ``width`` (padding:
    ``pad_id`` at position 0, written to the ``scratch`` column)."""
    count = len(leaders)
    ids = torch.full((count, width), pad_id, dtype=torch.long)
    pos = torch.zeros((count, width), dtype=torch.long)
    cols = torch.full((count, width), scratch, dtype=torch.long)
    for i, (row, start, end) in enumerate(leaders):
        n = end - start
        ids[i, width - n :] = torch.tensor(row.prompt_ids[start:end], dtype=torch.long)
        pos[i, width - n :] = torch.arange(start, end)
        cols[i, width - n :] = torch.arange(start, end)
    return ids, pos, cols


def flat_layout(forwards: list[PlannedForward], *, exact: bool, length_step: int, scratch: int, pad_id: int,
                device: torch.device) -> FlatPrefill:
    """The :class:`~.flat_forward.FlatPrefill` of ``forwards`` (consecutive planned forwards of one admission)."""
    ids, positions, slots, cols = [], [], [], []
    groups, copies = [], []
    offset = 0
    for forward in forwards:
        width, kv_len = forward_shape(forward.leaders, exact=exact, length_step=length_step, scratch=scratch)
        padded_ids, pos, columns = padded_segments(forward.leaders, width, pad_id, scratch)
        places = (columns != scratch).reshape(-1).nonzero().squeeze(1)
        count = places.numel()
        row_slots = torch.tensor([row.slot for row, _, _ in forward.leaders], dtype=torch.long)
        ids.append(padded_ids.reshape(-1)[places])
        positions.append(pos.reshape(-1)[places])
        cols.append(columns.reshape(-1)[places])
        slots.append(row_slots[places // width])
        last = offset + (columns != scratch).sum(1).cumsum(0) - 1  # each leader's last token
        if forward.finished:
            rows = forward.logit_rows
            last = last if rows is None else last[torch.tensor(rows, dtype=torch.long)]
        mask = (torch.arange(kv_len)[None, None, :] <= pos[:, :, None])[:, None]  # pad queries see column 0
        groups.append(AttentionGroup(
            flat=torch.arange(offset, offset + count, device=device), padded=places.to(device),
            rows=len(forward.leaders), width=width, slots=row_slots.to(device), kv_len=kv_len, mask=mask.to(device),
            last=last.to(device) if forward.finished else None))
        copies.extend(shared_columns(forward, device))
        offset += count
    size = round_up(max(offset, 2), ROW_MULTIPLE)  # rows repeating the first query, whose results are dropped

    def flat(parts: list[torch.Tensor]) -> torch.Tensor:
        whole = torch.cat(parts)
        return torch.cat([whole, whole[:1].expand(size - offset)]).to(device)

    return FlatPrefill(flat(ids), flat(positions), flat(slots), flat(cols), offset, groups, copies)


def shared_columns(forward: PlannedForward, device: torch.device) -> list[SharedColumns]:
    """The columns each leader of ``forward`` computes for the rows that share its segment."""
    followers: dict[int, list[int]] = {}
    for (row, _, _), j in zip(forward.segments, forward.lead, strict=True):
        if row is not forward.leaders[j][0]:
            followers.setdefault(j, []).append(row.slot)
    return [SharedColumns(forward.leaders[j][0].slot, torch.tensor(targets, dtype=torch.long, device=device),
                          forward.leaders[j][1], forward.leaders[j][2]) for j, targets in followers.items()]
