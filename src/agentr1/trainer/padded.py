"""The rows as tensors, built once: verl's padded layout and every response-aligned value the trainer reads.

:func:`pad_rows` turns :class:`~agentr1.trainer.rows.TrainRow` s into a :class:`PaddedBatch` in one pass over
their lists; from there the advantage stage (``agentr1.trainer.algorithms``), the teacher of on-policy
distillation and the policy's update read and write tensors only. The rows stay beside the tensors for what is
not a tensor (sessions, groups, segments, anchors, images).

verl's left/right padded layout: ``prompts`` (B, P) left-padded, ``responses`` (B, R) right-padded,
``input_ids`` = prompts ++ responses, ``attention_mask`` 1 on real tokens, ``position_ids`` counting real tokens
from 0, and response-aligned (B, R) tensors in :attr:`PaddedBatch.extra`, 0 on padding: ``rollout_log_probs``
(the serving engine's log-probs), ``token_rewards``, and ``advantages``, ``returns``, ``values`` once known.
Values taken from the rows keep the rows' precision (float64); verl gets float32
(:meth:`PaddedBatch.to_tensordict`, converted with verl's ``left_right_2_no_padding`` into the nested (no-padding)
TensorDict that verl's engines consume).
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentr1.trainer.rows import TrainRow

__all__ = ["PaddedBatch", "pad_rows"]

# response-aligned lists of a row -> their names in PaddedBatch.extra; the last three only when every row has them
_FROM_ROWS = {"old_logprobs": "rollout_log_probs", "token_rewards": "token_rewards", "advantages": "advantages",
              "returns": "returns", "values": "values"}
_WHEN_FILLED = ("advantages", "returns", "values")


@dataclass
class PaddedBatch:
    rows: Sequence[TrainRow]  # what the tensors were built from, one per batch row
    prompts: torch.Tensor  # (B, P) long, left-padded
    responses: torch.Tensor  # (B, R) long, right-padded
    attention_mask: torch.Tensor  # (B, P + R) long
    position_ids: torch.Tensor  # (B, P + R) long
    response_mask: torch.Tensor  # (B, R) float, 1 on sampled (action) tokens
    response_lengths: list[int]
    has_rollout_log_probs: torch.Tensor  # (B,) bool: False where the serving engine gave no log-probs
    extra: dict[str, torch.Tensor] = field(default_factory=dict)  # response-aligned (B, R), 0 on padding
    # per row, what verl passes to the model besides the ids (pixel_values ...; {} for text rows); None: text model
    multi_modal_inputs: list[dict[str, torch.Tensor]] | None = None

    def __len__(self) -> int:
        return int(self.prompts.shape[0])

    @property
    def num_tokens(self) -> int:
        """Real tokens (prompt + response) in the batch."""
        return int(self.attention_mask.sum())

    @property
    def num_action_tokens(self) -> int:
        return int(self.response_mask.sum())

    def select(self, index: Sequence[int]) -> PaddedBatch:
        """The rows at ``index``, padded as wide as this batch (verl's mini-batches of one update)."""
        idx = torch.as_tensor(list(index), dtype=torch.long)
        picked = idx.tolist()
        return PaddedBatch(
            rows=[self.rows[i] for i in picked],
            prompts=self.prompts[idx],
            responses=self.responses[idx],
            attention_mask=self.attention_mask[idx],
            position_ids=self.position_ids[idx],
            response_mask=self.response_mask[idx],
            response_lengths=[self.response_lengths[i] for i in picked],
            has_rollout_log_probs=self.has_rollout_log_probs[idx],
            extra={k: v[idx] for k, v in self.extra.items()},
            multi_modal_inputs=(None if self.multi_modal_inputs is None
                                else [self.multi_modal_inputs[i] for i in picked]),
        )

    def trimmed(self) -> PaddedBatch:
        """The same rows without the padding none of them needs: what :func:`pad_rows` would have made of them."""
        prompt_width = int(self.attention_mask[:, : self.prompts.shape[1]].sum(dim=1).max())
        width = max(self.response_lengths)
        start = self.prompts.shape[1] - prompt_width
        end = self.prompts.shape[1] + width
        return dataclasses.replace(
            self,
            prompts=self.prompts[:, start:],
            responses=self.responses[:, :width],
            attention_mask=self.attention_mask[:, start:end],
            position_ids=self.position_ids[:, start:end],
            response_mask=self.response_mask[:, :width],
            extra={k: v[:, :width] for k, v in self.extra.items()},
        )

    def response_tensor(self, values: Sequence[Sequence[float]], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Per-row response-aligned lists (one entry per response token) as a (B, R) tensor, 0 on padding."""
        if len(values) != len(self):
            raise ValueError(f"{len(values)} rows of values for {len(self)} rows")
        for i, (row, n) in enumerate(zip(values, self.response_lengths, strict=True)):
            if len(row) != n:
                raise ValueError(f"row {i} has {len(row)} values, its response {n} tokens")
        return _scatter_rows(values, self.response_lengths, self.responses.shape[1], dtype)

    def unpad(self, values: torch.Tensor) -> list[list[float]]:
        """(B, R) response-aligned tensor -> one list per row, padding dropped."""
        values = values.detach().double().cpu()
        return [values[i, :n].tolist() for i, n in enumerate(self.response_lengths)]

    def to_tensordict(self, *, keys: Sequence[str] = (), sequence_loss_mask: bool = False, **non_tensor: Any) -> Any:
        """verl's no-padding TensorDict with the response-aligned ``keys`` from :attr:`extra` (as float32)
        and ``non_tensor`` metadata (``temperature``, ``global_batch_size``, ...).

        ``sequence_loss_mask``: ``loss_mask`` as verl's SFT data has it (what ``sft_loss`` reads):
        nested over each whole sequence, 0 on the prompt, ``response_mask`` on the response;
        otherwise it is the (B, R) ``response_mask`` that ``left_right_2_no_padding`` sets."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import left_right_2_no_padding

        tensors: dict[str, Any] = {
            "prompts": self.prompts,
            "responses": self.responses,
            "input_ids": torch.cat([self.prompts, self.responses], dim=1),
            "attention_mask": self.attention_mask,
            "position_ids": self.position_ids,
            "response_mask": self.response_mask,
        }
        for key in keys:
            tensors[key] = self.extra[key].float()
        td = left_right_2_no_padding(tu.get_tensordict(tensors))
        if self.multi_modal_inputs is not None:  # verl's engines read it per micro-batch (extract_multi_modal_inputs)
            td["multi_modal_inputs"] = tu.get_tensordict({"m": list(self.multi_modal_inputs)})["m"]
        if sequence_loss_mask:
            full = torch.cat([self.response_mask.new_zeros(self.prompts.shape), self.response_mask], dim=1)
            values = full[self.attention_mask.bool()]  # row-major, as left_right_2_no_padding packs input_ids
            td["loss_mask"] = torch.nested.nested_tensor_from_jagged(values, offsets=td["input_ids"].offsets())
        tu.assign_non_tensor(td, **non_tensor)
        return td


def pad_rows(
    rows: Sequence[TrainRow], *, pad_id: int = 0, need_advantages: bool = False, need_returns: bool = False
) -> PaddedBatch:
    """Pad ``rows`` into verl's layout. ``extra`` holds ``rollout_log_probs`` (the rows' ``old_logprobs``) and
    ``token_rewards``, and ``advantages``, ``returns``, ``values`` when every row carries them (``need_*``:
    an error names the first row without them)."""
    if not rows:
        raise ValueError("no rows")
    for i, row in enumerate(rows):
        _check_row(i, row, need_advantages=need_advantages, need_returns=need_returns)
    prompt_lengths = [len(r.prompt_ids) for r in rows]
    response_lengths = [len(r.response_ids) for r in rows]
    prompt_width, width = max(prompt_lengths), max(response_lengths)
    prompts = _scatter_rows([r.prompt_ids for r in rows], prompt_lengths, prompt_width, torch.long, fill=pad_id,
                            left=True)
    responses = _scatter_rows([r.response_ids for r in rows], response_lengths, width, torch.long, fill=pad_id)
    columns = torch.arange(prompt_width + width)
    starts = prompt_width - torch.tensor(prompt_lengths)
    ends = prompt_width + torch.tensor(response_lengths)
    attention = ((columns >= starts[:, None]) & (columns < ends[:, None])).long()
    extra = {}
    for name, key in _FROM_ROWS.items():
        if name in _WHEN_FILLED and not all(len(getattr(r, name)) == n for r, n in zip(rows, response_lengths,
                                                                                      strict=True)):
            continue
        extra[key] = _scatter_rows([getattr(r, name) for r in rows], response_lengths, width, torch.float64)
    if not all(bool(torch.isfinite(extra[k]).all()) for k in ("rollout_log_probs", "advantages", "returns")
               if k in extra):
        raise ValueError("rows carry non-finite logprobs, advantages or returns")
    return PaddedBatch(
        rows=rows,
        prompts=prompts,
        responses=responses,
        attention_mask=attention,
        position_ids=(attention.cumsum(dim=1) - 1).clamp(min=0) * attention,
        response_mask=_scatter_rows([r.response_mask for r in rows], response_lengths, width, torch.float32),
        response_lengths=response_lengths,
        has_rollout_log_probs=torch.tensor([r.has_old_logprobs for r in rows], dtype=torch.bool),
        extra=extra,
    )


def _check_row(i: int, row: TrainRow, *, need_advantages: bool, need_returns: bool) -> None:
    n = len(row.response_ids)
    if not row.prompt_ids:
        raise ValueError(f"row {i}: empty prompt_ids (verl needs at least one prompt token)")
    if not row.response_ids:
        raise ValueError(f"row {i}: empty response_ids")
    checks: dict[str, Sequence[float]] = {"response_mask": row.response_mask, "old_logprobs": row.old_logprobs,
                                          "token_rewards": row.token_rewards}
    if need_advantages:
        checks["advantages"] = row.advantages
    if need_returns:
        checks["returns"] = row.returns
    for name, values in checks.items():
        if len(values) != n:
            hint = " (not filled in by the advantage stage?)" if name in ("advantages", "returns") else ""
            raise ValueError(f"row {i}: {name} has {len(values)} entries, response_ids {n}{hint}")


def _scatter_rows(values: Sequence[Sequence[float]], lengths: Sequence[int], width: int, dtype: torch.dtype, *,
                  fill: float = 0, left: bool = False) -> torch.Tensor:
    """A (len(values), width) tensor of the rows' lists (each as long as ``lengths`` says), right-padded or, with
    ``left``, left-padded; filled from one flat buffer of all of them (a tensor per row costs more than the copy)."""
    out = torch.full((len(values), width), fill, dtype=dtype)
    if sum(lengths) == 0:
        return out
    kind, flat_dtype = ("q", torch.long) if dtype == torch.long else ("d", torch.float64)
    buffer: array[Any] = array(kind)
    for row in values:  # array.fromlist is several times faster than iterating the lists
        buffer.fromlist(row if isinstance(row, list) else list(row))
    flat = torch.frombuffer(buffer, dtype=flat_dtype)
    columns, counts = torch.arange(width), torch.tensor(lengths)
    real = columns >= (width - counts)[:, None] if left else columns < counts[:, None]
    out[real] = flat.to(dtype)  # a boolean mask takes its places row by row, as the flat buffer lists them
    return out
