"""The Ray actor behind :class:`~agentr1.trainer.policy.ray_policy.RayPolicy`: verl's own
FSDP ``TrainingWorker`` (``verl.workers.engine_workers``), plus the few calls our policy needs
that it lacks (a seeded initialisation, stepping the lr schedule on its own, reading the lr,
gathering full weights).

verl starts one of these per GPU (or per CPU process) through its single controller
(``RayWorkerGroup``); each joins the worker group's ``torch.distributed`` world, so FSDP2 shards
the model and averages gradients across them. Data-carrying calls (``infer_batch``,
``train_batch``) are split over the data-parallel ranks by verl's dispatch; the calls here run on
every rank (``ONE_TO_ALL``) because gathering full weights is a collective.

Process set-up happens before verl's ``__init__``: on CPU the "cpu" platform is registered when
this module is imported, and ``VERL_PLATFORM=cpu`` (set in the actor's environment by the Ray policy)
selects it; the process group is gloo (verl's default,
``cpu:gloo,<device>:<backend>``, names the CPU twice there), and verl's FSDP engines are
registered for the device with the same shims as the in-process policy.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from . import _platform

if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    _platform._platform_class()  # registered before verl.workers reads the device name at import

from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.engine_workers import TrainingWorker

__all__ = ["PolicyTrainingWorker"]


class PolicyTrainingWorker(TrainingWorker):
    """verl's ``TrainingWorker`` on ``device`` ("cpu" or "cuda"), with four extra calls."""

    def __init__(self, config: Any, device: str) -> None:
        import torch.distributed as dist

        if device == "cpu" and not dist.is_initialized():
            dist.init_process_group(backend="gloo", rank=int(os.environ["RANK"]),
                                    world_size=int(os.environ["WORLD_SIZE"]))
        _platform._register_engines_for(device)
        _platform._patch_value_head_attention()
        _platform._patch_logprobs()
        super().__init__(config)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def initialize_seeded(self, seed: int) -> None:
        """verl's ``reset`` (build the FSDP model and optimizer) with torch seeded first, as the
        in-process policy does: a new head (the critic's value head) starts the same every time."""
        torch.manual_seed(seed)
        self.engine.initialize()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def lr_scheduler_step(self) -> float:
        """One step of the lr schedule (the in-process policy takes it once per ``update``)."""
        return float(self.engine.lr_scheduler_step())

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def current_lr(self) -> float:
        return float(self.engine.optimizer.param_groups[0]["lr"])

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """Unsharded weights under Hugging Face names, on the CPU; rank 0 answers, the others
        take part in the gather and answer None (so the weights cross Ray once)."""
        params, _ = self.engine.get_per_tensor_param()
        tensors = {name: tensor.detach().to("cpu", copy=True) for name, tensor in params}
        return tensors if self.rank == 0 else None
