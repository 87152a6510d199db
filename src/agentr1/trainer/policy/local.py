"""The policy trained in this process: verl's FSDP engine and losses on one CPU or one GPU.

:class:`LocalPolicy` owns the policy (actor), optionally a frozen reference model (KL in
the loss) and a critic (value model, for GAE-style estimators). One :meth:`~LocalPolicy.update`
is one PPO step in verl's dataflow:

1. the rows in verl's padded layout (``rollout_log_probs`` = the serving engine's log-probs), as the trainer
   built them once (:meth:`~LocalPolicy.pad`, :class:`~agentr1.trainer.padded.PaddedBatch`); every method takes
   such a batch or the rows themselves;
2. ``old_log_probs``: recomputed by the actor before the update (or the rollout log-probs in
   ``bypass_mode``); verl's rollout correction turns the two into ``rollout_is_weights`` and
   rejects tokens (``algorithm.rollout_correction.rollout_is`` / ``rollout_rs``);
3. ``ref_log_prob`` from the reference model when ``use_kl_loss``;
4. ``ppo_epochs`` x mini-batches of verl's ``engine.train_batch(td, partial(ppo_loss, actor_config))``;
   verl splits each mini-batch into micro-batches and takes one optimizer step per mini-batch.

Weights reach the serving side through :meth:`~LocalPolicy.sync_to`: without touching disk
for an in-process :class:`~agentr1.gateway.backends.local.LocalBackend`, or as a servable HF
directory under ``sync_dir`` that SGLang / vLLM servers load (``backend.update_weights(path)``);
:meth:`~LocalPolicy.save` writes such a directory anywhere; :meth:`~LocalPolicy.save_checkpoint` /
:meth:`~LocalPolicy.load_checkpoint` keep optimizer state through verl's checkpoint manager.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial, wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch

from agentr1.core import release_freed_memory, release_openmp_threads
from agentr1.trainer.padded import PaddedBatch, pad_rows
from agentr1.trainer.rows import TrainRow

from ._platform import prepare_verl
from .config import PolicyConfig, verl_actor_config
from .export import save_hf_directory
from .memory_budget import resolve_memory_settings
from .multimodal import RowImageInputs
from .verl_model import VerlModel

if TYPE_CHECKING:
    from agentr1.gateway.backends import LocalBackend

__all__ = ["LocalPolicy", "Rows"]

Rows = Sequence[TrainRow] | PaddedBatch  # what the policy's methods take: rows, or rows already padded

log = logging.getLogger(__name__)

STATE_FILE = "policy_state.json"  # in a checkpoint's policy/ folder: versions and settings
OLD_STATE_FILE = "engine_state.json"  # its name in checkpoints written before 2026-12-05 (a45b2bb)


def _critic_loss_config(config: PolicyConfig) -> Any:
    from verl.workers.config import FSDPCriticConfig

    return FSDPCriticConfig(
        strategy="fsdp2",
        use_dynamic_bsz=config.ppo_micro_batch_size_per_gpu is None,
        ppo_micro_batch_size_per_gpu=config.ppo_micro_batch_size_per_gpu,
        cliprange_value=config.cliprange_value,
        loss_agg_mode=config.critic_loss_agg_mode,
        loss_scale_factor=config.loss_scale_factor,
    )


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


def _mean_metrics(steps: list[dict[str, float]], prefix: str) -> dict[str, float]:
    """Mean over optimizer steps (as verl's ``reduce_metrics``), names under ``prefix``."""
    keys = {k for m in steps for k in m}
    out: dict[str, float] = {}
    for key in sorted(keys):
        name = key if key.startswith(prefix) else f"{prefix}{key.split('/', 1)[-1]}"
        out[name] = float(np.mean([m[key] for m in steps if key in m]))
    return out


class LocalPolicy:
    """Policy updates through verl in this process (see the module docstring).

    ``model_path``: a HF model directory (config, tokenizer, safetensors). ``config`` and keyword
    overrides: :class:`PolicyConfig` fields, e.g. ``LocalPolicy(path, lr=1e-5,
    loss_mode="gspo", use_kl_loss=True)``."""

    def __init__(
        self, model_path: str | os.PathLike[str], config: PolicyConfig | None = None, *,
        sync_dir: str | os.PathLike[str] | None = None, **overrides: Any
    ) -> None:
        config = config or PolicyConfig()
        if overrides:
            config = PolicyConfig.from_dict({**config.__dict__, **overrides})
        self.device = prepare_verl(config.device)
        config.validate()
        self.model_path = Path(model_path)
        config, self.memory_plan = resolve_memory_settings(config, self.device, self.model_path)
        log.info("update memory on %s: %s", self.device, self.memory_plan.describe())
        self.config = config
        started = time.perf_counter()
        self.actor = VerlModel(self.model_path, role="actor", config=config, device=self.device)
        self.ref = (
            VerlModel(self.model_path, role="ref", config=config, device=self.device) if config.use_kl_loss else None
        )
        critic_path = Path(config.critic_model_path) if config.critic_model_path else self.model_path
        self.critic = (
            VerlModel(critic_path, role="critic", config=config, device=self.device) if config.critic else None
        )
        self.actor_config = verl_actor_config(config)
        self.critic_config = _critic_loss_config(config) if config.critic else None
        self.version = 0  # optimizer steps taken by update() calls
        self.critic_version = 0
        self.sync_dir = Path(sync_dir) if sync_dir else None  # weights for remote servers (None: a temp dir)
        self._generator = torch.Generator().manual_seed(config.data_loader_seed)
        # a vision-language model: rows carry image hashes, read from the trace store's images
        self._init_images()
        log.info("policy on %s ready in %.1f s", self.device, time.perf_counter() - started)

    @property
    def pad_token_id(self) -> int:
        return self.actor.pad_token_id

    # -- log-probs, values ----------------------------------------------------------------

    def _init_images(self) -> None:
        """Images of multimodal rows (None for a text-only model); shared with the Ray policy."""
        self.image_store: Any = None  # the loop sets ``store.images``; anything with get(sha256) -> bytes
        self.image_inputs = RowImageInputs.for_model(self.model_path, self._read_image)

    def _read_image(self, sha256: str) -> bytes:
        if self.image_store is None:
            raise KeyError("this policy has no image store (set policy.image_store = store.images)")
        return bytes(self.image_store.get(sha256))

    def pad(self, rows: Sequence[TrainRow], **need: bool) -> PaddedBatch:
        """The rows as tensors, once: verl's layout with this model's pad id and, for a vision-language model, each
        row's pixel inputs. ``need_advantages`` / ``need_returns``: fail naming a row without them."""
        batch = pad_rows(rows, pad_id=self.pad_token_id, **need)
        if self.image_inputs is not None:
            batch.multi_modal_inputs = self.image_inputs.for_rows(rows)
        return batch

    def _batch(self, rows: Rows, **need: bool) -> PaddedBatch:
        """A batch this call may change: the rows padded, or a padded batch's fields in an object of its own (the
        caller's batch keeps its mask and ``extra``; tensors are shared, never written in place)."""
        if not isinstance(rows, PaddedBatch):
            return self.pad(rows, **need)
        for name, flag in (("advantages", "need_advantages"), ("returns", "need_returns")):
            if need.get(flag) and name not in rows.extra:
                raise ValueError(f"the batch has no {name} (not filled in by the advantage stage?)")
        return dataclasses.replace(rows, extra=dict(rows.extra))

    def log_probs(self, batch: PaddedBatch, *, temperature: float = 1.0) -> torch.Tensor:
        """(B, R) the current policy's log-probs of the response tokens, 0.0 where the mask is 0."""
        return self.actor.infer(batch, temperature=temperature)["log_probs"] * batch.response_mask

    def critic_values(self, batch: PaddedBatch) -> torch.Tensor:
        """(B, R) the critic's value of the state before each response token (needs ``critic=True``)."""
        return self._require(self.critic, "critic").infer(batch)["values"]

    def compute_logprobs(self, rows: Rows, *, temperature: float = 1.0) -> list[list[float]]:
        """:meth:`log_probs`, one list per row."""
        batch = self._batch(rows)
        return batch.unpad(self.log_probs(batch, temperature=temperature))

    def compute_ref_logprobs(self, rows: Rows, *, temperature: float = 1.0) -> list[list[float]]:
        """The frozen reference model's log-probs (needs ``use_kl_loss``), one list per row."""
        batch = self._batch(rows)
        return batch.unpad(
            self._require(self.ref, "use_kl_loss").infer(batch, temperature=temperature)["log_probs"]
            * batch.response_mask
        )

    def kl_to_reference(self, rows: Rows, *, temperature: float = 1.0) -> float:
        """verl's ``kl_penalty`` (``kl_loss_type``) between policy and reference, token-mean on the mask."""
        from verl.trainer.ppo.core_algos import agg_loss, kl_penalty

        batch = self._batch(rows)
        ref = self._require(self.ref, "use_kl_loss").infer(batch, temperature=temperature)["log_probs"]
        cur = self.actor.infer(batch, temperature=temperature)["log_probs"]
        if not batch.response_mask.any():
            return 0.0
        kl = kl_penalty(logprob=cur, ref_logprob=ref, kl_penalty=self.config.kl_loss_type)  # type: ignore[arg-type]
        return float(agg_loss(loss_mat=kl, loss_mask=batch.response_mask.bool(), loss_agg_mode="token-mean"))

    def compute_values(self, rows: Rows) -> list[list[float]]:
        """:meth:`critic_values`, one list per row."""
        batch = self._batch(rows)
        return batch.unpad(self.critic_values(batch))

    # -- updates --------------------------------------------------------------------------

    @update_phase
    def update(
        self,
        rows: Rows,
        *,
        temperature: float = 1.0,
        old_log_probs: Sequence[Sequence[float]] | None = None,
    ) -> dict[str, float]:
        """One PPO step of the policy on ``rows`` (advantages filled in); returns verl-named metrics.

        ``old_log_probs``: the behaviour policy's log-probs per row, when the caller computed them
        (e.g. :meth:`compute_logprobs` before an earlier update); by default the actor recomputes
        them now (or takes the rows' rollout log-probs in ``bypass_mode``)."""
        from verl.workers.utils.losses import ppo_loss

        cfg = self.config
        started = time.perf_counter()
        batch = self._batch(rows, need_advantages=True)
        metrics: dict[str, float] = {}
        mask = batch.response_mask
        missing = ~batch.has_rollout_log_probs  # rows whose steps came without rollout log-probs
        batch.extra["rollout_log_probs"] = batch.extra["rollout_log_probs"].float()  # as verl reads them
        if old_log_probs is not None:
            old = batch.response_tensor(old_log_probs)
        elif cfg.bypass_mode and not missing.any():
            old = batch.extra["rollout_log_probs"].clone()
        else:
            out = self.actor.infer(batch, temperature=temperature, entropy=cfg.calculate_entropy)
            old = out["log_probs"]
            if "entropy" in out and mask.any():
                metrics["actor/entropy"] = self._agg(out["entropy"], mask)
            if cfg.bypass_mode:
                old = torch.where(missing[:, None], old, batch.extra["rollout_log_probs"])
        # no rollout log-probs: the row is taken as on-policy (IS weight 1, never rejected)
        rollout = batch.extra["rollout_log_probs"]
        batch.extra["rollout_log_probs"] = torch.where(missing[:, None], old, rollout)
        batch.extra["old_log_probs"] = old
        keys = ["old_log_probs", "advantages"]
        if not cfg.bypass_mode and mask.any():
            metrics.update(self._rollout_correction(batch))
            if "rollout_is_weights" in batch.extra:
                keys.append("rollout_is_weights")
        if cfg.use_kl_loss:
            ref = self._require(self.ref, "use_kl_loss")
            batch.extra["ref_log_prob"] = ref.infer(batch, temperature=temperature)["log_probs"]
            keys.append("ref_log_prob")

        loss_fn = partial(ppo_loss, self.actor_config)
        steps, skipped = self._run_epochs(
            self.actor, batch, loss_fn, keys, temperature=temperature, calculate_entropy=cfg.entropy_coeff != 0
        )
        if steps:
            metrics["actor/lr"] = self.actor.lr
            self.actor.lr_step()
            self.version += 1
        metrics.update(_mean_metrics(steps, "actor/"))
        elapsed = time.perf_counter() - started
        metrics.update(self._perf(batch, len(steps), skipped, elapsed, "actor/"))
        metrics.update(self.memory_plan.metrics())  # the memory settings in force, "auto" or set
        return metrics

    @update_phase
    def sft_update(self, rows: Rows) -> dict[str, float]:
        """One optimizer step of supervised fine-tuning on ``rows`` with verl's ``sft_loss``: the
        negative log-likelihood of the tokens where ``response_mask`` is 1 (the actions; prompt and
        feedback tokens carry no loss), averaged over those tokens, through the same verl engine and
        optimizer as :meth:`update` (verl splits the rows into micro-batches). ``sft/loss`` is
        that mean NLL before the step."""
        from verl.workers.utils.losses import sft_loss

        started = time.perf_counter()
        batch = self._batch(rows)
        if batch.num_action_tokens == 0:
            raise ValueError("the rows have no action tokens (response_mask is 0 everywhere): nothing to learn")
        out = self.actor.train(batch, partial(sft_loss, config=None), keys=[], temperature=1.0,
                               sequence_loss_mask=True)
        metrics = {"sft/loss": out.pop("loss"), "sft/lr": self.actor.lr}
        metrics.update({f"sft/{key.split('/', 1)[-1]}": value for key, value in out.items()})
        self.actor.lr_step()
        self.version += 1
        metrics.update(self._perf(batch, 1, 0, time.perf_counter() - started, "sft/"))
        return metrics

    @update_phase
    def update_critic(self, rows: Rows) -> dict[str, float]:
        """Fit the critic to the rows' ``returns`` with verl's clipped ``value_loss``."""
        from verl.workers.utils.losses import value_loss

        critic = self._require(self.critic, "critic")
        started = time.perf_counter()
        batch = self._batch(rows, need_returns=True)
        if "values" not in batch.extra:  # values from critic_values (same weights) save a pass
            batch.extra["values"] = critic.infer(batch)["values"]
        loss_fn = partial(value_loss, self.critic_config)  # type: ignore[arg-type]
        steps, skipped = self._run_epochs(critic, batch, loss_fn, ["values", "returns"], temperature=1.0)
        metrics: dict[str, float] = {}
        if steps:
            metrics["critic/lr"] = critic.lr
            critic.lr_step()
            self.critic_version += 1
        metrics.update(_mean_metrics(steps, "critic/"))
        metrics.update(self._perf(batch, len(steps), skipped, time.perf_counter() - started, "critic/"))
        return metrics

    def _run_epochs(
        self, model: VerlModel, batch: PaddedBatch, loss_fn: Any, keys: list[str], **non_tensor: Any
    ) -> tuple[list[dict[str, float]], int]:
        cfg = self.config
        steps: list[dict[str, float]] = []
        skipped = 0
        for _ in range(cfg.ppo_epochs):
            for index in split_rows(
                len(batch), cfg.ppo_mini_batch_size, shuffle=cfg.shuffle, generator=self._generator
            ):
                mini = batch.select(index)
                if mini.num_action_tokens == 0:  # nothing to learn; verl's token-mean would divide by 0
                    skipped += 1
                    continue
                steps.append(model.train(mini, loss_fn, keys=keys, **non_tensor))
        return steps, skipped

    def _rollout_correction(self, batch: PaddedBatch) -> dict[str, float]:
        """verl's rollout correction between recomputed and rollout log-probs (IS weights, rejection)."""
        from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

        cfg = self.config
        weights, mask, metrics = compute_rollout_correction_and_rejection_mask(
            old_log_prob=batch.extra["old_log_probs"],
            rollout_log_prob=batch.extra["rollout_log_probs"],
            response_mask=batch.response_mask,
            rollout_is=cfg.rollout_is,
            rollout_is_threshold=cfg.rollout_is_threshold,
            rollout_is_batch_normalize=cfg.rollout_is_batch_normalize,
            rollout_rs=cfg.rollout_rs,
            rollout_rs_threshold=cfg.rollout_rs_threshold,
        )
        batch.response_mask = mask.to(batch.response_mask.dtype)
        if weights is not None:
            batch.extra["rollout_is_weights"] = weights.batch["rollout_is_weights"].float()
        return {k if k.startswith("rollout_corr/") else f"rollout_corr/{k}": float(v) for k, v in metrics.items()}

    def _agg(self, values: torch.Tensor, mask: torch.Tensor) -> float:
        from verl.trainer.ppo.core_algos import agg_loss

        return float(agg_loss(loss_mat=values, loss_mask=mask.bool(), loss_agg_mode=self.config.loss_agg_mode))

    def _perf(self, batch: PaddedBatch, steps: int, skipped: int, elapsed: float, prefix: str) -> dict[str, float]:
        tokens = batch.num_tokens * self.config.ppo_epochs
        perf = "perf/" if prefix == "actor/" else f"perf/{prefix.rstrip('/')}_"  # the actor's are the headline
        return {
            f"{prefix}optimizer_steps": float(steps),
            f"{prefix}skipped_mini_batches": float(skipped),
            f"{prefix}action_tokens": float(batch.num_action_tokens),
            f"{prefix}rows": float(len(batch)),
            f"{perf}update_s": elapsed,
            f"{perf}tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
        }

    @staticmethod
    def _require(model: VerlModel | None, flag: str) -> VerlModel:
        if model is None:
            raise RuntimeError(f"this policy was built without {flag}=True")
        return model

    # -- weights out ----------------------------------------------------------------------

    def state_dict_for_serving(self, *, copy: bool = True) -> dict[str, torch.Tensor]:
        """Full policy weights under Hugging Face names (``copy=False`` may alias live parameters)."""
        return {name: (t.clone() if copy else t) for name, t in self.actor.named_tensors()}

    async def sync_to(self, backend: LocalBackend | Any) -> int:
        """Load the current policy into the serving ``backend``; returns the policy version it reports
        afterwards (it waits for requests in flight, so no response mixes versions).

        A backend that declares ``weights_in_memory`` (the embedded engine; SGLang servers on this machine, through
        the trainer's serving) gets the tensors with ``update_weights_from_tensors``; any other (SGLang or vLLM
        servers anywhere) gets a HF directory written under ``sync_dir`` and
        loads it with ``update_weights(path)`` — ``/update_weights_from_disk`` or vLLM's reload, so
        ``sync_dir`` must be a path the servers can read (a shared filesystem across nodes). Only
        the latest directory is kept: a server that missed one update loads the next."""
        if getattr(backend, "weights_in_memory", False):
            try:
                return await backend.update_weights_from_tensors(self.state_dict_for_serving(copy=False))
            finally:
                release_openmp_threads()  # this (event loop) thread's, as after an update (update_phase)
        if self.sync_dir is None:
            self.sync_dir = Path(tempfile.mkdtemp(prefix="agentr1-weights-"))
        path = await asyncio.to_thread(self.save, self.sync_dir / f"policy-{self.version}")
        version = int(await backend.update_weights(str(path)))
        for older in self.sync_dir.glob("policy-*"):
            if older != path:
                shutil.rmtree(older, ignore_errors=True)
        return version

    def save(self, path: str | os.PathLike[str]) -> Path:
        """A servable HF directory: ``model.safetensors`` + the source's config and tokenizer."""
        return save_hf_directory(self.actor.named_tensors(), self.model_path, path)

    def save_checkpoint(self, path: str | os.PathLike[str]) -> Path:
        """Resumable state (weights, optimizer, lr schedule, rng) through verl's checkpoint manager."""
        root = Path(path)
        self.actor.save_checkpoint(root / "actor", self.version)
        if self.critic is not None:
            self.critic.save_checkpoint(root / "critic", self.critic_version)
        state = {"version": self.version, "critic_version": self.critic_version, "config": _jsonable(self.config)}
        (root / STATE_FILE).write_text(json.dumps(state, indent=2))
        return root

    def load_checkpoint(self, path: str | os.PathLike[str]) -> None:
        root = Path(path)
        state_file = root / STATE_FILE
        if not state_file.is_file() and (root / OLD_STATE_FILE).is_file():
            state_file = root / OLD_STATE_FILE
        state = json.loads(state_file.read_text())
        self.actor.load_checkpoint(root / "actor")
        if self.critic is not None and (root / "critic").is_dir():
            self.critic.load_checkpoint(root / "critic")
        self.version = int(state.get("version", 0))
        self.critic_version = int(state.get("critic_version", 0))


def _jsonable(config: PolicyConfig) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.__dict__.items()}
