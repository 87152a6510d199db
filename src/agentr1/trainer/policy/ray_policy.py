"""verl on Ray: the same policy updates as :class:`~.local.LocalPolicy`, trained by verl's
FSDP ``TrainingWorker`` s (actor; reference when ``use_kl_loss``; critic when the estimator needs
values) running as Ray actors on ``nnodes`` x ``n_gpus_per_node`` devices.

The driver (this process) keeps the PPO dataflow of the in-process policy unchanged (old
log-probs, rollout correction, reference log-probs, epochs x mini-batches, metrics): only the
model calls go to a worker group. :class:`RayModel` has the calls of :class:`~.verl_model.VerlModel`
(``infer``, ``train``, ``lr_step``, ``lr``, ``named_tensors``, checkpoints) and sends each through
verl's single controller (``RayWorkerGroup`` over a ``RayResourcePool``), whose dispatch splits a
batch over the data-parallel ranks. verl's configs are built by the same function as in-process
(:func:`~.verl_model.verl_configs`), so both train with identical settings.

With several data-parallel ranks a batch must split evenly: rows are padded to a multiple of the
rank count with copies whose ``response_mask`` is all zero (they add nothing to a token-mean loss;
``global_batch_size`` stays the real row count).

Weights to the serving side: the inherited :meth:`~.local.LocalPolicy.sync_to` (the
gathered state dict for an in-process ``LocalBackend``; for SGLang / vLLM servers a HF directory
under ``sync_dir`` — a path the servers can read, a shared filesystem across nodes — loaded with
``update_weights(path)``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from agentr1.trainer.padded import PaddedBatch

from ._platform import prepare_verl, resolve_device
from .config import PolicyConfig
from .local import LocalPolicy, model_roles, role_model_path, with_overrides
from .memory_budget import resolve_memory_settings
from .updates import TrainedModel
from .verl_model import Role, reduce_metrics, verl_configs

__all__ = ["RayModel", "RayPolicy", "policy_for", "start_ray"]

log = logging.getLogger(__name__)

PLATFORM_ENV = {"VERL_USE_EXTERNAL_MODULES": "agentr1.trainer.policy._platform", "VERL_PLATFORM": "cpu"}
QUIET_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "VERL_USE_EXTERNAL_PLUGINS": "none"}


def start_ray(num_cpus: int | None = None, address: str | None = None) -> None:
    """Join the Ray cluster at ``address`` (``ray start --head`` on the head node; "auto" finds it),
    or start a local one; workers inherit the environment verl needs here."""
    import ray

    if ray.is_initialized():
        return
    env = dict(QUIET_ENV)
    if address is None:
        ray.init(num_cpus=num_cpus, include_dashboard=False, runtime_env={"env_vars": env},
                 log_to_driver=True)
    else:
        ray.init(address=address, runtime_env={"env_vars": env})


class RayModel:
    """One model (actor, ref or critic) trained by a verl ``RayWorkerGroup`` of
    :class:`~.ray_worker.PolicyTrainingWorker` s; the call surface of ``VerlModel``."""

    def __init__(self, model_path: str | Path, *, role: Role, config: PolicyConfig, device: str,
                 resource_pool: Any) -> None:
        import ray
        from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup
        from verl.trainer.config import CheckpointConfig
        from verl.workers.config import TrainingWorkerConfig

        from .ray_worker import PolicyTrainingWorker

        self.role = role
        built = verl_configs(model_path, role=role, config=config, device=device)
        self.engine_config = built.engine_config
        self.remove_padding = built.remove_padding
        worker_config = TrainingWorkerConfig(
            model_type=built.model_type, model_config=built.model_config, engine_config=built.engine_config,
            optimizer_config=built.optimizer_config, checkpoint_config=CheckpointConfig())
        worker = RayClassWithInitArgs(ray.remote(PolicyTrainingWorker), config=worker_config, device=device)
        env = {**QUIET_ENV, **(PLATFORM_ENV if device == "cpu" else {})}
        self.group = RayWorkerGroup(resource_pool=resource_pool, ray_cls_with_init=worker,
                                    name_prefix=f"agentr1_{role}_", worker_env=env, device_name=device)
        self.world_size = self.group.world_size
        self.group.initialize_seeded(config.seed)  # builds the FSDP model and optimizer on every rank
        tokenizer = built.model_config.tokenizer
        pad = getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None
        self.pad_token_id = int(pad) if pad is not None else 0
        self._loss_fn: Callable[..., Any] | None = None

    # -- batches --------------------------------------------------------------------------

    def _even(self, batch: PaddedBatch) -> tuple[PaddedBatch, int]:
        """``batch`` padded to a multiple of the data-parallel ranks with masked copies of row 0."""
        extra = -len(batch) % self.world_size
        if not extra:
            return batch, len(batch)
        padded = batch.select(list(range(len(batch))) + [0] * extra)
        padded.response_mask[len(batch):] = 0
        return padded, len(batch)

    def _tensordict(self, batch: PaddedBatch, **non_tensor: Any) -> Any:
        size = self.engine_config.micro_batch_size_per_gpu
        per_rank = len(batch) // self.world_size
        if not self.engine_config.use_dynamic_bsz and per_rank % size:
            raise ValueError(
                f"{per_rank} rows per data-parallel rank do not split into micro-batches of "
                f"ppo_micro_batch_size_per_gpu={size}; choose a divisor or leave it None to batch by "
                "ppo_max_token_len_per_gpu")
        global_token_num = batch.attention_mask.sum(dim=1).tolist()
        return batch.to_tensordict(pad_token_id=self.pad_token_id, global_token_num=global_token_num,
                                   **non_tensor)

    # -- forward only ---------------------------------------------------------------------

    @torch.no_grad()
    def infer(self, batch: PaddedBatch, *, temperature: float = 1.0, entropy: bool = False) -> dict[str, torch.Tensor]:
        """Response-aligned (B, R) ``log_probs`` (+ ``entropy``) or, for the critic, ``values``."""
        from verl.workers.utils.padding import no_padding_2_padding

        even, real = self._even(batch)
        td = self._tensordict(even, temperature=float(temperature), calculate_entropy=entropy, compute_loss=False)
        output = self.group.infer_batch(td).get()
        names = ["values"] if self.role == "critic" else ["log_probs"] + (["entropy"] if entropy else [])
        return {name: no_padding_2_padding(output[name], td).float().cpu()[:real] for name in names}

    # -- training -------------------------------------------------------------------------

    def train(self, batch: PaddedBatch, loss_fn: Callable[..., Any], *, keys: list[str],
              **non_tensor: Any) -> dict[str, float]:
        """One optimizer step on ``batch`` (one mini-batch; verl splits it over ranks and micro-batches)."""
        if loss_fn is not self._loss_fn:
            self.group.set_loss_fn(loss_fn)
            self._loss_fn = loss_fn
        even, real = self._even(batch)
        td = self._tensordict(even, keys=keys, global_batch_size=real, **non_tensor)
        output = self.group.train_batch(td).get()
        from verl.utils import tensordict_utils as tu
        from verl.utils.metric import Metric

        metrics: dict[str, Any] = {}
        for key, value in tu.get(output, "metrics").items():
            if key.startswith("perf/") or key == "lr":
                continue  # memory gauges and the lr: reported by the policy itself
            if isinstance(value, list) and value and isinstance(value[0], Metric):
                value = Metric.aggregate_dp(value)  # one Metric per rank: mean over ranks, as verl's trainer
            metrics[key] = value
        return reduce_metrics(metrics)

    def lr_step(self) -> float:
        return float(self.group.lr_scheduler_step()[0])

    @property
    def lr(self) -> float:
        return float(self.group.current_lr()[0])

    # -- weights --------------------------------------------------------------------------

    def named_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full (unsharded) tensors under the Hugging Face names, gathered by rank 0."""
        yield from self.group.full_state_dict()[0].items()

    def save_checkpoint(self, path: str | Path, step: int) -> None:
        self.group.save_checkpoint(str(path), global_step=step)

    def load_checkpoint(self, path: str | Path) -> None:
        self.group.load_checkpoint(str(path), del_local_after_load=False)


class RayPolicy(LocalPolicy):
    """:class:`LocalPolicy` whose models train on verl's Ray workers (module docstring).

    ``n_gpus_per_node`` x ``nnodes`` workers per model (verl's ``trainer.n_gpus_per_node`` /
    ``trainer.nnodes``; on CPU: processes). ``ray_address``: an existing cluster (None: a local
    one with ``ray_num_cpus`` logical CPUs). ``sync_dir``: where weights for remote servers go."""

    def __init__(self, model_path: str | os.PathLike[str], config: PolicyConfig | None = None, *,
                 n_gpus_per_node: int = 1, nnodes: int = 1, ray_address: str | None = None,
                 ray_num_cpus: int | None = None, sync_dir: str | os.PathLike[str] | None = None,
                 **overrides: Any) -> None:
        config = with_overrides(config, overrides)
        config.validate()
        if n_gpus_per_node < 1 or nnodes < 1:
            raise ValueError(f"n_gpus_per_node and nnodes must be >= 1, not {n_gpus_per_node} and {nnodes}")
        device = resolve_device(config.device)
        if device == "cpu":  # verl in this process must resolve the same "cpu" platform as the workers
            prepare_verl("cpu")
        from verl.single_controller.ray import RayResourcePool

        config, memory_plan = resolve_memory_settings(config, device, Path(model_path))
        log.info("update memory on %s: %s", device, memory_plan.describe())
        roles = model_roles(config)
        started = time.perf_counter()
        # one bundle per device; every role's worker shares it (verl's max_colocate_count)
        cpus = ray_num_cpus or (max(2, len(roles) * n_gpus_per_node) if device == "cpu" else None)
        start_ray(num_cpus=cpus, address=ray_address)
        pool = RayResourcePool([n_gpus_per_node] * nnodes, use_gpu=device == "cuda",
                               max_colocate_count=len(roles), name_prefix="agentr1")
        models: dict[Role, TrainedModel] = {
            role: RayModel(role_model_path(config, Path(model_path), role), role=role, config=config, device=device,
                           resource_pool=pool) for role in roles}
        # the rows' pixel inputs are built here and sent to the workers with the batch
        self._compose(model_path, config, device, memory_plan, models, sync_dir)
        log.info("Ray policy: %d x %d %s workers per model, ready in %.1f s", nnodes, n_gpus_per_node,
                 self.device, time.perf_counter() - started)


def policy_for(model_path: str | os.PathLike[str], config: PolicyConfig, trainer: Any) -> LocalPolicy:
    """The policy the job's ``trainer.policy`` selects: ``local`` (this process) or ``ray``
    (``trainer.n_gpus_per_node`` x ``trainer.nnodes`` workers, cluster ``trainer.ray_address``)."""
    sync_dir = Path(trainer.default_local_dir) / "weights-for-serving"  # read by SGLang / vLLM servers
    if trainer.policy == "local":
        return LocalPolicy(model_path, config, sync_dir=sync_dir)
    if trainer.policy == "ray":
        return RayPolicy(model_path, config, n_gpus_per_node=trainer.n_gpus_per_node, nnodes=trainer.nnodes,
                               ray_address=trainer.ray_address, sync_dir=sync_dir)
    raise ValueError(f"unknown trainer.policy {trainer.policy!r}: local or ray")
