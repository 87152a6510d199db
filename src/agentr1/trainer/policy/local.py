"""The policy trained in this process: verl's FSDP engine and losses on one CPU or one GPU.

:class:`LocalPolicy` is the policy's one interface, composed of its roles, each in a module of its own:

- :mod:`.actor`: the policy (actor) and its updates. One :meth:`~LocalPolicy.update` is one PPO step in verl's
  dataflow: the rows in verl's padded layout (``rollout_log_probs`` = the serving engine's log-probs, :mod:`.batches`);
  ``old_log_probs`` recomputed by the actor (or the rollout log-probs in ``bypass_mode``), turned by verl's rollout
  correction into ``rollout_is_weights`` and rejected tokens; ``ref_log_prob`` from the reference model when
  ``use_kl_loss``; ``ppo_epochs`` x mini-batches of ``engine.train_batch(td, partial(ppo_loss, actor_config))``
  (verl splits each mini-batch into micro-batches, one optimizer step per mini-batch). :meth:`~LocalPolicy.sft_update`
  is a supervised step through the same engine and optimizer;
- :mod:`.reference`: the frozen reference model (KL in the loss), optional;
- :mod:`.critic`: the value model (GAE-style estimators), optional;
- :mod:`.weight_sync`: weights to a serving backend (:meth:`~LocalPolicy.sync_to`) or a servable directory
  (:meth:`~LocalPolicy.save`);
- :mod:`.checkpoint`: resumable state with the optimizers (:meth:`~LocalPolicy.save_checkpoint` /
  :meth:`~LocalPolicy.load_checkpoint`).

Every method takes rows or a batch already padded (:meth:`~LocalPolicy.pad`, :class:`~agentr1.trainer.padded.
PaddedBatch`). :class:`~.ray_policy.RayPolicy` composes the same roles over models on Ray workers.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from agentr1.trainer.padded import PaddedBatch
from agentr1.trainer.rows import TrainRow

from ._platform import prepare_verl
from .actor import Actor
from .batches import RowBatches, Rows
from .checkpoint import load_policy_checkpoint, save_policy_checkpoint
from .config import PolicyConfig
from .critic import Critic
from .memory_budget import MemoryPlan, resolve_memory_settings
from .reference import Reference
from .updates import TrainedModel, require, update_phase
from .verl_model import Role, VerlModel
from .weight_sync import WeightSync

__all__ = ["LocalPolicy", "model_roles", "role_model_path", "with_overrides"]

log = logging.getLogger(__name__)


def model_roles(config: PolicyConfig) -> list[Role]:
    """The models a policy with ``config`` trains or reads: the actor, the reference (``use_kl_loss``), the critic."""
    return ["actor", *(["ref"] if config.use_kl_loss else []), *(["critic"] if config.critic else [])]  # type: ignore[list-item]


def role_model_path(config: PolicyConfig, model_path: Path, role: Role) -> Path:
    """The model directory of ``role``: the policy's, or ``critic_model_path`` for the critic."""
    return Path(config.critic_model_path) if role == "critic" and config.critic_model_path else model_path


def with_overrides(config: PolicyConfig | None, overrides: dict[str, Any]) -> PolicyConfig:
    config = config or PolicyConfig()
    return PolicyConfig.from_dict({**config.__dict__, **overrides}) if overrides else config


class LocalPolicy:
    """Policy updates through verl in this process (see the module docstring).

    ``model_path``: a HF model directory (config, tokenizer, safetensors). ``config`` and keyword
    overrides: :class:`PolicyConfig` fields, e.g. ``LocalPolicy(path, lr=1e-5,
    loss_mode="gspo", use_kl_loss=True)``. ``sync_dir``: where weights for remote servers go."""

    def __init__(
        self, model_path: str | os.PathLike[str], config: PolicyConfig | None = None, *,
        sync_dir: str | os.PathLike[str] | None = None, **overrides: Any
    ) -> None:
        config = with_overrides(config, overrides)
        device = prepare_verl(config.device)
        config.validate()
        config, memory_plan = resolve_memory_settings(config, device, Path(model_path))
        log.info("update memory on %s: %s", device, memory_plan.describe())
        started = time.perf_counter()
        models: dict[Role, TrainedModel] = {
            role: VerlModel(role_model_path(config, Path(model_path), role), role=role, config=config, device=device)
            for role in model_roles(config)}
        self._compose(model_path, config, device, memory_plan, models, sync_dir)
        log.info("policy on %s ready in %.1f s", self.device, time.perf_counter() - started)

    def _compose(self, model_path: str | os.PathLike[str], config: PolicyConfig, device: str,
                 memory_plan: MemoryPlan, models: dict[Role, TrainedModel],
                 sync_dir: str | os.PathLike[str] | None) -> None:
        """The roles over the built ``models`` (one per :func:`model_roles`)."""
        self.model_path = Path(model_path)
        self.config, self.device, self.memory_plan = config, device, memory_plan
        self.actor, self.critic = models["actor"], models.get("critic")  # the models updated
        generator = torch.Generator().manual_seed(config.data_loader_seed)  # the mini-batches' order, both models
        ref = models.get("ref")
        self.reference = Reference(ref, kl_loss_type=config.kl_loss_type) if ref is not None else None
        self.actor_updates = Actor(self.actor, config, reference=self.reference, generator=generator,
                                   memory_plan=memory_plan)
        self.critic_updates = Critic(self.critic, config, generator=generator) if self.critic is not None else None
        self.weights = WeightSync(self.actor, self.model_path, sync_dir)
        # a vision-language model: rows carry image hashes, read from the trace store's images
        self.batches = RowBatches(self.model_path, self.actor.pad_token_id)

    # -- state the callers read and set -----------------------------------------------------

    @property
    def version(self) -> int:
        """Optimizer steps of the actor (:meth:`update`, :meth:`sft_update`)."""
        return self.actor_updates.version

    @property
    def critic_version(self) -> int:
        return self.critic_updates.version if self.critic_updates is not None else 0

    @property
    def pad_token_id(self) -> int:
        return self.batches.pad_token_id

    @property
    def image_store(self) -> Any:
        """Where the rows' images are read (anything with get(sha256) -> bytes; the loop sets ``store.images``)."""
        return self.batches.image_store

    @image_store.setter
    def image_store(self, store: Any) -> None:
        self.batches.image_store = store

    @property
    def sync_dir(self) -> Path | None:
        """Where weights for remote servers go (None: a temporary directory)."""
        return self.weights.sync_dir

    @sync_dir.setter
    def sync_dir(self, path: str | os.PathLike[str] | None) -> None:
        self.weights.sync_dir = Path(path) if path else None

    # -- log-probs, values ----------------------------------------------------------------

    def pad(self, rows: Sequence[TrainRow], **need: bool) -> PaddedBatch:
        """The rows as tensors, once (:class:`~.batches.RowBatches`)."""
        return self.batches.pad(rows, **need)

    def log_probs(self, batch: PaddedBatch, *, temperature: float = 1.0) -> torch.Tensor:
        """(B, R) the current policy's log-probs of the response tokens, 0.0 where the mask is 0."""
        return self.actor_updates.log_probs(batch, temperature=temperature)

    def critic_values(self, batch: PaddedBatch) -> torch.Tensor:
        """(B, R) the critic's value of the state before each response token (needs ``critic=True``)."""
        return require(self.critic_updates, "critic").values(batch)

    def compute_logprobs(self, rows: Rows, *, temperature: float = 1.0) -> list[list[float]]:
        """:meth:`log_probs`, one list per row."""
        batch = self.batches.own(rows)
        return batch.unpad(self.log_probs(batch, temperature=temperature))

    def compute_ref_logprobs(self, rows: Rows, *, temperature: float = 1.0) -> list[list[float]]:
        """The frozen reference model's log-probs (needs ``use_kl_loss``), one list per row."""
        batch = self.batches.own(rows)
        reference = require(self.reference, "use_kl_loss")
        return batch.unpad(reference.log_probs(batch, temperature=temperature) * batch.response_mask)

    def kl_to_reference(self, rows: Rows, *, temperature: float = 1.0) -> float:
        """verl's ``kl_penalty`` (``kl_loss_type``) between policy and reference, token-mean on the mask."""
        batch = self.batches.own(rows)
        return require(self.reference, "use_kl_loss").kl_from(self.actor, batch, temperature=temperature)

    def compute_values(self, rows: Rows) -> list[list[float]]:
        """:meth:`critic_values`, one list per row."""
        batch = self.batches.own(rows)
        return batch.unpad(self.critic_values(batch))

    # -- updates --------------------------------------------------------------------------

    @update_phase
    def update(self, rows: Rows, *, temperature: float = 1.0,
               old_log_probs: Sequence[Sequence[float]] | None = None) -> dict[str, float]:
        """One PPO step of the policy on ``rows`` (advantages filled in); returns verl-named metrics.

        ``old_log_probs``: the behaviour policy's log-probs per row, when the caller computed them
        (e.g. :meth:`compute_logprobs` before an earlier update); by default the actor recomputes
        them now (or takes the rows' rollout log-probs in ``bypass_mode``)."""
        batch = self.batches.own(rows, need_advantages=True)
        return self.actor_updates.ppo_update(batch, temperature=temperature, old_log_probs=old_log_probs)

    @update_phase
    def sft_update(self, rows: Rows) -> dict[str, float]:
        """One optimizer step of supervised fine-tuning on ``rows`` with verl's ``sft_loss``: the
        negative log-likelihood of the tokens where ``response_mask`` is 1 (the actions; prompt and
        feedback tokens carry no loss), averaged over those tokens, through the same verl engine and
        optimizer as :meth:`update` (verl splits the rows into micro-batches). ``sft/loss`` is
        that mean NLL before the step."""
        return self.actor_updates.sft_update(self.batches.own(rows))

    @update_phase
    def update_critic(self, rows: Rows) -> dict[str, float]:
        """Fit the critic to the rows' ``returns`` with verl's clipped ``value_loss``."""
        critic = require(self.critic_updates, "critic")
        return critic.update(self.batches.own(rows, need_returns=True))

    # -- weights out ----------------------------------------------------------------------

    def state_dict_for_serving(self, *, copy: bool = True) -> dict[str, torch.Tensor]:
        """Full policy weights under Hugging Face names (``copy=False`` may alias live parameters)."""
        return self.weights.state_dict(copy=copy)

    async def sync_to(self, backend: Any) -> int:
        """Load the current policy into the serving ``backend`` (:mod:`.weight_sync`: in memory for a backend that
        declares ``weights_in_memory``, else through a HF directory under ``sync_dir``); returns the policy version it
        reports afterwards (it waits for requests in flight, so no response mixes versions)."""
        return await self.weights.sync_to(backend, self.version)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """A servable HF directory: ``model.safetensors`` + the source's config and tokenizer."""
        return self.weights.save(path)

    def save_checkpoint(self, path: str | os.PathLike[str]) -> Path:
        """Resumable state (weights, optimizer, lr schedule, rng) through verl's checkpoint manager."""
        return save_policy_checkpoint(path, self.actor_updates, self.critic_updates, self.config)

    def load_checkpoint(self, path: str | os.PathLike[str]) -> None:
        load_policy_checkpoint(path, self.actor_updates, self.critic_updates)
