"""Per-step views of trajectory tensors, shared by the step-level estimators."""

from __future__ import annotations

import torch

__all__ = ["broadcast_steps", "num_steps", "step_first_positions", "step_sums", "valid_tokens"]


def valid_tokens(response_mask: torch.Tensor, step_ids: torch.Tensor) -> torch.Tensor:
    """Tokens that belong to a step: mask 1 and a step id >= 0 (bool, same shape)."""
    return (response_mask > 0) & (step_ids >= 0)


def num_steps(step_ids: torch.Tensor, valid: torch.Tensor) -> int:
    return int(step_ids[valid].max().item()) + 1 if bool(valid.any()) else 0


def step_sums(x: torch.Tensor, step_ids: torch.Tensor, valid: torch.Tensor, n_steps: int) -> torch.Tensor:
    """(T, S): the sum of ``x`` over each step's tokens."""
    out = torch.zeros(x.shape[0], n_steps, dtype=x.dtype)
    if n_steps:
        out.scatter_add_(1, step_ids.clamp(min=0), torch.where(valid, x, torch.zeros_like(x)))
    return out


def step_first_positions(step_ids: torch.Tensor, valid: torch.Tensor,
                         n_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(T, S) position of each step's first token, and (T, S) whether the step exists."""
    rows, width = step_ids.shape
    pos = torch.arange(width).expand(rows, width)
    first = torch.full((rows, n_steps), width, dtype=torch.int64)
    if n_steps:
        first.scatter_reduce_(1, step_ids.clamp(min=0), torch.where(valid, pos, torch.full_like(pos, width)),
                              reduce="amin")
    exists = first < width
    return first.clamp(max=max(width - 1, 0)), exists


def broadcast_steps(per_step: torch.Tensor, step_ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(T, L): each token gets its step's value (0 off steps)."""
    if per_step.shape[1] == 0:
        return torch.zeros(step_ids.shape, dtype=per_step.dtype)
    return per_step.gather(1, step_ids.clamp(min=0)) * valid.to(per_step.dtype)
