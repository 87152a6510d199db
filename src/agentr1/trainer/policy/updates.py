"""What the updates of the policy's models share: the model they train (:class:`TrainedModel`), the cleanup around an
update phase (:func:`update_phase`), the epochs over mini-batches (:func:`run_epochs`) and the metrics they report."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import wraps
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import torch

from agentr1.core import release_freed_memory, release_openmp_threads
from agentr1.trainer.padded import PaddedBatch

from .config import PolicyConfig

__all__ = ["TrainedModel", "mean_metrics", "perf_metrics", "require", "run_epochs", "split_rows", "update_phase"]


class TrainedModel(Protocol):
    """One model of the policy (actor, reference or critic) as the roles call it: verl's engine in this process
    (:class:`~.verl_model.VerlModel`) or on Ray workers (:class:`~.ray_policy.RayModel`)."""

    pad_token_id: int

    def infer(self, batch: PaddedBatch, *, temperature: float = 1.0, entropy: bool = False
              ) -> dict[str, torch.Tensor]: ...

    def train(self, batch: PaddedBatch, loss_fn: Callable[..., Any], *, keys: list[str],
              **non_tensor: Any) -> dict[str, float]: ...

    def lr_step(self) -> float: ...

    @property
    def lr(self) -> float: ...

    def named_tensors(self) -> Iterator[tuple[str, torch.Tensor]]: ...

    def save_checkpoint(self, path: str | Path, step: int) -> None: ...

    def load_checkpoint(self, path: str | Path) -> None: ...


_Method = TypeVar("_Method", bound=Callable[..., Any])


def update_phase(method: _Method) -> _Method:
    """An update phase of the policy, cleaned up after for the phase that follows (the rollout, in this process):

    - memory: under jemalloc (``agentr1.core.allocator``) what the phase frees is kept for its own later
      micro-batches; before it starts and when it ends, every freed page goes back to the system, so its peak is its
      own working set beside what is live, and the rollout after it starts from what is live too (kept, up to 1 GiB
      of leftovers could sit beside the next phase's peak: a demo run with 1 GiB kept before the update peaked at
      6.32 GiB, over its 6 GiB bound; in float32 the rollout after an update with 1 GiB kept raised the peak by 1.1
      GiB, docs/benchmarks.md row 53); the laptop demo's SFT stage grew to 7.7 GiB over 6 steps with nothing given
      back;
    - threads: its thread's OpenMP workers end with it (``agentr1.core.openmp``), else the engine's decode steps
      pay a futex wake-up per parallel product for the rest of the run."""

    @wraps(method)
    def phase(*args: Any, **kwargs: Any) -> Any:
        release_freed_memory(keep_bytes=0)
        try:
            return method(*args, **kwargs)
        finally:
            release_freed_memory(keep_bytes=0)
            release_openmp_threads()

    return phase  # type: ignore[return-value]


def split_rows(n: int, size: int | None, *, shuffle: bool, generator: torch.Generator | None = None) -> list[list[int]]:
    """Indices of ``n`` rows in chunks of ``size`` (the last may be smaller); None: one chunk."""
    order = torch.randperm(n, generator=generator).tolist() if shuffle else list(range(n))
    size = n if size is None else max(1, size)
    return [order[i : i + size] for i in range(0, n, size)]


def run_epochs(model: TrainedModel, batch: PaddedBatch, loss_fn: Any, keys: list[str], *, config: PolicyConfig,
               generator: torch.Generator, **non_tensor: Any) -> tuple[list[dict[str, float]], int]:
    """``ppo_epochs`` x mini-batches of ``batch``, one optimizer step each; returns each step's metrics and the number
    of mini-batches skipped for having no action token (verl's token-mean would divide by 0)."""
    steps: list[dict[str, float]] = []
    skipped = 0
    for _ in range(config.ppo_epochs):
        for index in split_rows(len(batch), config.ppo_mini_batch_size, shuffle=config.shuffle, generator=generator):
            mini = batch.select(index)
            if mini.num_action_tokens == 0:
                skipped += 1
                continue
            steps.append(model.train(mini, loss_fn, keys=keys, **non_tensor))
    return steps, skipped


def mean_metrics(steps: list[dict[str, float]], prefix: str) -> dict[str, float]:
    """Mean over optimizer steps (as verl's ``reduce_metrics``), names under ``prefix``."""
    keys = {k for m in steps for k in m}
    out: dict[str, float] = {}
    for key in sorted(keys):
        name = key if key.startswith(prefix) else f"{prefix}{key.split('/', 1)[-1]}"
        out[name] = float(np.mean([m[key] for m in steps if key in m]))
    return out


def perf_metrics(batch: PaddedBatch, steps: int, skipped: int, elapsed: float, prefix: str, *,
                 ppo_epochs: int) -> dict[str, float]:
    """The size and speed of one update: optimizer steps, mini-batches skipped, rows, tokens per second."""
    tokens = batch.num_tokens * ppo_epochs
    perf = "perf/" if prefix == "actor/" else f"perf/{prefix.rstrip('/')}_"  # the actor's are the headline
    return {
        f"{prefix}optimizer_steps": float(steps),
        f"{prefix}skipped_mini_batches": float(skipped),
        f"{prefix}action_tokens": float(batch.num_action_tokens),
        f"{prefix}rows": float(len(batch)),
        f"{perf}update_s": elapsed,
        f"{perf}tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
    }


_Part = TypeVar("_Part")


def require(part: _Part | None, flag: str) -> _Part:
    """``part`` (a model or role of the policy), or a clear error naming the setting the policy was built without."""
    if part is None:
        raise RuntimeError(f"this policy was built without {flag}=True")
    return part

