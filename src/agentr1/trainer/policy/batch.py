"""TrainRows -> verl's batch layout, and response-aligned tensors back to per-row lists.

verl's left/right padded layout: ``prompts`` (B, P) left-padded, ``responses`` (B, R)
right-padded, ``input_ids`` = prompts ++ responses, ``attention_mask`` 1 on real tokens,
``position_ids`` counting real tokens from 0, and response-aligned (B, R) float tensors
(``response_mask``, ``old_log_probs``, ``rollout_log_probs``, ``advantages``, ``returns``, ...).
:meth:`PaddedBatch.to_tensordict` converts it with verl's ``left_right_2_no_padding`` into the
nested (no-padding) TensorDict that verl's engines consume.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..rows import TrainRow

__all__ = ["PaddedBatch", "pad_rows", "split_rows"]


def _check_row(i: int, row: TrainRow, *, need_advantages: bool, need_returns: bool) -> None:
    n = len(row.response_ids)
    if not row.prompt_ids:
        raise ValueError(f"row {i}: empty prompt_ids (verl needs at least one prompt token)")
    if not row.response_ids:
        raise ValueError(f"row {i}: empty response_ids")
    checks: dict[str, Sequence[float]] = {"response_mask": row.response_mask, "old_logprobs": row.old_logprobs}
    if need_advantages:
        checks["advantages"] = row.advantages
    if need_returns:
        checks["returns"] = row.returns
    for name, values in checks.items():
        if len(values) != n:
            hint = " (not filled in by the advantage stage?)" if name in ("advantages", "returns") else ""
            raise ValueError(f"row {i}: {name} has {len(values)} entries, response_ids {n}{hint}")


@dataclass
class PaddedBatch:
    prompts: torch.Tensor  # (B, P) long, left-padded
    responses: torch.Tensor  # (B, R) long, right-padded
    attention_mask: torch.Tensor  # (B, P + R) long
    position_ids: torch.Tensor  # (B, P + R) long
    response_mask: torch.Tensor  # (B, R) float, 0 on padding
    response_lengths: list[int]
    has_rollout_log_probs: torch.Tensor  # (B,) bool: False where the serving engine gave no log-probs
    extra: dict[str, torch.Tensor] = field(default_factory=dict)  # response-aligned (B, R) floats
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
        idx = torch.as_tensor(list(index), dtype=torch.long)
        return PaddedBatch(
            prompts=self.prompts[idx],
            responses=self.responses[idx],
            attention_mask=self.attention_mask[idx],
            position_ids=self.position_ids[idx],
            response_mask=self.response_mask[idx],
            response_lengths=[self.response_lengths[i] for i in idx.tolist()],
            has_rollout_log_probs=self.has_rollout_log_probs[idx],
            extra={k: v[idx] for k, v in self.extra.items()},
            multi_modal_inputs=(None if self.multi_modal_inputs is None
                                else [self.multi_modal_inputs[i] for i in idx.tolist()]),
        )

    def to_tensordict(self, *, keys: Sequence[str] = (), sequence_loss_mask: bool = False, **non_tensor: Any) -> Any:
        """verl's no-padding TensorDict with the response-aligned ``keys`` from :attr:`extra`
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
            tensors[key] = self.extra[key]
        td = left_right_2_no_padding(tu.get_tensordict(tensors))
        if self.multi_modal_inputs is not None:  # verl's engines read it per micro-batch (extract_multi_modal_inputs)
            td["multi_modal_inputs"] = tu.get_tensordict({"m": list(self.multi_modal_inputs)})["m"]
        if sequence_loss_mask:
            full = torch.cat([self.response_mask.new_zeros(self.prompts.shape), self.response_mask], dim=1)
            values = full[self.attention_mask.bool()]  # row-major, as left_right_2_no_padding packs input_ids
            td["loss_mask"] = torch.nested.nested_tensor_from_jagged(values, offsets=td["input_ids"].offsets())
        tu.assign_non_tensor(td, **non_tensor)
        return td

    def unpad(self, values: torch.Tensor) -> list[list[float]]:
        """(B, R) response-aligned tensor -> one list per row, padding dropped."""
        values = values.detach().float().cpu()
        return [values[i, :n].tolist() for i, n in enumerate(self.response_lengths)]


def pad_rows(
    rows: Sequence[TrainRow], *, pad_id: int = 0, need_advantages: bool = False, need_returns: bool = False
) -> PaddedBatch:
    """Pad ``rows`` into verl's layout; ``extra`` holds ``rollout_log_probs`` (the rows'
    ``old_logprobs``, sampled by the serving engine), ``advantages``, ``returns`` and, when every
    row carries them, the critic's ``values``."""
    if not rows:
        raise ValueError("no rows")
    for i, row in enumerate(rows):
        _check_row(i, row, need_advantages=need_advantages, need_returns=need_returns)
    batch = len(rows)
    p_len = max(len(r.prompt_ids) for r in rows)
    r_len = max(len(r.response_ids) for r in rows)
    prompts = torch.full((batch, p_len), pad_id, dtype=torch.long)
    responses = torch.full((batch, r_len), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, p_len + r_len), dtype=torch.long)
    mask = torch.zeros((batch, r_len), dtype=torch.float32)
    rollout = torch.zeros((batch, r_len), dtype=torch.float32)
    advantages = torch.zeros((batch, r_len), dtype=torch.float32)
    returns = torch.zeros((batch, r_len), dtype=torch.float32)
    values = torch.zeros((batch, r_len), dtype=torch.float32)
    has_values = all(len(getattr(r, "values", ())) == len(r.response_ids) for r in rows)
    for i, row in enumerate(rows):
        p, n = len(row.prompt_ids), len(row.response_ids)
        prompts[i, p_len - p :] = torch.tensor(row.prompt_ids, dtype=torch.long)
        responses[i, :n] = torch.tensor(row.response_ids, dtype=torch.long)
        attention[i, p_len - p : p_len + n] = 1
        mask[i, :n] = torch.tensor(row.response_mask, dtype=torch.float32)
        rollout[i, :n] = torch.tensor(row.old_logprobs, dtype=torch.float32)
        if len(row.advantages) == n:
            advantages[i, :n] = torch.tensor(row.advantages, dtype=torch.float32)
        if len(row.returns) == n:
            returns[i, :n] = torch.tensor(row.returns, dtype=torch.float32)
        if has_values:
            values[i, :n] = torch.tensor(row.values, dtype=torch.float32)
    if not torch.isfinite(rollout).all() or not torch.isfinite(advantages).all() or not torch.isfinite(returns).all():
        raise ValueError("rows carry non-finite logprobs, advantages or returns")
    position_ids = (attention.cumsum(dim=1) - 1).clamp(min=0) * attention
    extra = {"rollout_log_probs": rollout, "advantages": advantages, "returns": returns}
    if has_values:
        extra["values"] = values
    return PaddedBatch(
        prompts=prompts,
        responses=responses,
        attention_mask=attention,
        position_ids=position_ids,
        response_mask=mask,
        response_lengths=[len(r.response_ids) for r in rows],
        has_rollout_log_probs=torch.tensor([getattr(r, "has_old_logprobs", True) for r in rows], dtype=torch.bool),
        extra=extra,
    )


def split_rows(n: int, size: int | None, *, shuffle: bool, generator: torch.Generator | None = None) -> list[list[int]]:
    """Indices of ``n`` rows in chunks of ``size`` (the last may be smaller); None: one chunk."""
    order = torch.randperm(n, generator=generator).tolist() if shuffle else list(range(n))
    size = n if size is None else max(1, size)
    return [order[i : i + size] for i in range(0, n, size)]
