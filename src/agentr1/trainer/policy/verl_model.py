"""One model held by a verl FSDP engine in this process: the policy, its frozen reference or the critic.

Built with ``EngineRegistry.new(model_type, "fsdp2", model_config=HFModelConfig,
engine_config=FSDPEngineConfig, optimizer_config=FSDPOptimizerConfig, checkpoint_config=...)``
and driven the way verl's ``TrainingWorker`` drives it: ``infer_batch`` inside ``eval_mode()``,
``train_batch(td, loss_fn)`` inside ``train_mode()``, with the same non-tensor keys
(``use_dynamic_bsz``, ``max_token_len_per_gpu``, ``micro_batch_size_per_gpu``, ...).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from agentr1.trainer.padded import PaddedBatch

from .config import PolicyConfig
from .memory_budget import PLANNED

__all__ = ["Role", "VerlConfigs", "VerlModel", "reduce_metrics", "verl_configs"]

log = logging.getLogger(__name__)

Role = Literal["actor", "ref", "critic"]


def _flash_attn_usable(device: str) -> bool:
    return device == "cuda" and importlib.util.find_spec("flash_attn") is not None


def reduce_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """verl's per-micro-batch metrics (lists of ``Metric`` or numbers) -> one float each."""
    from verl.utils.metric import Metric

    out: dict[str, float] = {}
    for key, value in metrics.items():
        values = value if isinstance(value, list) else [value]
        if not values:
            continue
        if isinstance(values[0], Metric):
            merged = values[0].init_list()
            for item in values:
                merged.extend(item)
            out[key] = float(merged.aggregate())
        else:
            out[key] = float(np.mean([float(v) for v in values]))
    return out


_TOKENIZERS: dict[tuple[str, float], tuple[Any, Any]] = {}


def _attach_tokenizer(model_config: Any) -> None:
    """What ``HFModelConfig(load_tokenizer=True)`` does, with the tokenizer cached per directory:
    loading it (and probing for a multimodal processor) is most of the cost of building a model."""
    from verl.utils import hf_processor, hf_tokenizer
    from verl.utils.model import update_model_config

    path = Path(model_config.local_path)
    files = [path / name for name in ("tokenizer.json", "tokenizer_config.json") if (path / name).is_file()]
    key = (str(path.resolve()), max((f.stat().st_mtime for f in files), default=0.0))
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = (hf_tokenizer(str(path)), hf_processor(str(path)))
    tokenizer, processor = _TOKENIZERS[key]
    model_config.tokenizer, model_config.processor = tokenizer, processor
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    ids["pad_token_id"] = tokenizer.pad_token_id
    update_model_config(model_config.hf_config, override_config_kwargs=ids)


@dataclass
class VerlConfigs:
    """verl's configs of one model: what ``EngineRegistry.new`` (this process) and verl's
    ``TrainingWorkerConfig`` (Ray workers, :mod:`.ray_policy`) are built from."""

    model_type: str
    model_config: Any  # HFModelConfig, tokenizer attached
    engine_config: Any  # FSDPEngineConfig
    optimizer_config: Any  # FSDPOptimizerConfig
    remove_padding: bool


def verl_configs(model_path: str | Path, *, role: Role, config: PolicyConfig, device: str) -> VerlConfigs:
    """The verl configs of the ``role`` model at ``model_path`` on ``device`` (``config``'s memory settings resolved:
    :func:`~agentr1.trainer.policy.memory_budget.resolve_memory_settings`)."""
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig

    unresolved = [name for name in PLANNED if getattr(config, name) == "auto"]
    if unresolved:
        raise ValueError(f"{unresolved} are 'auto': resolve them for the device first (resolve_memory_settings)")

    model_type = "value_model" if role == "critic" else "language_model"
    attn = config.attn_implementation or ("flash_attention_2" if _flash_attn_usable(device) else "sdpa")
    remove_padding = config.remove_padding if config.remove_padding is not None else attn.startswith("flash")
    param_dtype = config.param_dtype
    if param_dtype == "auto":
        param_dtype = "fp32" if device == "cpu" else "bf16"
    model_config = HFModelConfig(
        path=str(model_path),
        model_type=model_type,
        override_config={"attn_implementation": attn},
        use_remove_padding=remove_padding,
        enable_gradient_checkpointing=bool(config.gradient_checkpointing) and role != "ref",
        load_tokenizer=False,  # loaded once per directory below (verl would load it per model)
    )
    _attach_tokenizer(model_config)
    dynamic = config.ppo_micro_batch_size_per_gpu is None
    engine_config = FSDPEngineConfig(
        strategy="fsdp2",
        # verl offloads forward-only models with pinned CPU memory, which needs an accelerator
        forward_only=role == "ref" and device != "cpu",
        model_dtype="bf16" if role == "ref" and param_dtype == "bf16" else "fp32",
        mixed_precision={"param_dtype": param_dtype, "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
        use_torch_compile=config.use_torch_compile if config.use_torch_compile is not None else device == "cuda",
        use_dynamic_bsz=dynamic,
        max_token_len_per_gpu=int(config.ppo_max_token_len_per_gpu),  # resolved above: numbers, not "auto"
        infer_max_token_len_per_gpu=int(config.ppo_infer_max_token_len_per_gpu),
        entropy_checkpointing=bool(config.entropy_checkpointing),
        micro_batch_size_per_gpu=config.ppo_micro_batch_size_per_gpu,  # type: ignore[arg-type]
        infer_micro_batch_size_per_gpu=config.ppo_micro_batch_size_per_gpu,  # type: ignore[arg-type]
        use_remove_padding=remove_padding,
        seed=config.seed,
    )
    critic = role == "critic"
    optimizer_config = FSDPOptimizerConfig(
        optimizer=config.optimizer,
        optimizer_impl=config.optimizer_impl,
        override_optimizer_config=config.override_optimizer_config,
        lr=config.critic_lr if critic else config.lr,
        weight_decay=config.weight_decay,
        betas=(float(config.betas[0]), float(config.betas[1])),
        clip_grad=config.clip_grad,
        lr_warmup_steps=config.critic_warmup_steps if critic else config.lr_warmup_steps,
        lr_scheduler_type=config.lr_scheduler_type,
        total_training_steps=config.total_training_steps,
        min_lr_ratio=config.min_lr_ratio,
    )
    return VerlConfigs(model_type, model_config, engine_config, optimizer_config, remove_padding)


class VerlModel:
    """A policy (``actor``), frozen reference (``ref``) or value model (``critic``) on one device."""

    def __init__(self, model_path: str | Path, *, role: Role, config: PolicyConfig, device: str) -> None:
        from verl.trainer.config import CheckpointConfig
        from verl.workers.engine import EngineRegistry

        self.role = role
        self.device = device
        built = verl_configs(model_path, role=role, config=config, device=device)
        self.model_type = built.model_type
        self.remove_padding = built.remove_padding
        self.model_config = built.model_config
        self.engine_config = built.engine_config
        self.optimizer_config = built.optimizer_config
        self.verl_engine = EngineRegistry.new(
            model_type=self.model_type,
            backend="fsdp2",
            model_config=self.model_config,
            engine_config=self.engine_config,
            optimizer_config=self.optimizer_config,
            checkpoint_config=CheckpointConfig(),
        )
        printed = io.StringIO()  # verl prints model sizes and memory use: keep them for the debug log
        with torch.random.fork_rng(devices=[]), contextlib.redirect_stdout(printed):
            torch.manual_seed(config.seed)  # new heads (the critic's) start the same every time
            self.verl_engine.initialize()
        log.debug("verl %s engine: %s", role, printed.getvalue().strip())
        tokenizer = self.model_config.tokenizer
        pad = getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None
        self.pad_token_id = int(pad) if pad is not None else 0

    # -- batch metadata -------------------------------------------------------------------

    def _batch_keys(self) -> dict[str, Any]:
        """What verl's TrainingWorker injects into every batch."""
        return {
            "use_remove_padding": self.remove_padding,
            "use_dynamic_bsz": self.engine_config.use_dynamic_bsz,
            "max_token_len_per_gpu": self.engine_config.max_token_len_per_gpu,
            "micro_batch_size_per_gpu": self.engine_config.micro_batch_size_per_gpu,
            "use_fused_kernels": False,
            "pad_token_id": self.pad_token_id,
        }

    def check_micro_batching(self, rows: int) -> None:
        size = self.engine_config.micro_batch_size_per_gpu
        if not self.engine_config.use_dynamic_bsz and rows % size:
            raise ValueError(
                f"{rows} rows do not split into micro-batches of ppo_micro_batch_size_per_gpu={size}; "
                "choose a divisor or leave it None to batch by ppo_max_token_len_per_gpu"
            )

    # -- forward only ---------------------------------------------------------------------

    @torch.no_grad()
    def infer(self, batch: PaddedBatch, *, temperature: float = 1.0, entropy: bool = False) -> dict[str, torch.Tensor]:
        """Response-aligned (B, R) outputs: ``log_probs`` (+ ``entropy``) or, for the critic, ``values``."""
        from verl.workers.utils.padding import no_padding_2_padding

        self.check_micro_batching(len(batch))
        td = batch.to_tensordict(
            temperature=float(temperature), calculate_entropy=entropy, compute_loss=False, **self._batch_keys()
        )
        with self.verl_engine.eval_mode():
            output = self.verl_engine.infer_batch(td, loss_function=None)
        model_output = output["model_output"]
        names = ["values"] if self.role == "critic" else ["log_probs"] + (["entropy"] if entropy else [])
        return {name: no_padding_2_padding(model_output[name], td).float().cpu() for name in names}

    # -- training -------------------------------------------------------------------------

    def train(
        self, batch: PaddedBatch, loss_fn: Callable[..., Any], *, keys: list[str], **non_tensor: Any
    ) -> dict[str, float]:
        """One optimizer step on ``batch`` (one mini-batch, split into micro-batches by verl)."""
        self.check_micro_batching(len(batch))
        td = batch.to_tensordict(keys=keys, global_batch_size=len(batch), **non_tensor, **self._batch_keys())
        with self.verl_engine.train_mode():
            output = self.verl_engine.train_batch(td, loss_function=loss_fn)
        metrics = reduce_metrics(output["metrics"])
        metrics["loss"] = float(sum(output["loss"]))
        return metrics

    def lr_step(self) -> float:
        return float(self.verl_engine.lr_scheduler_step())

    @property
    def lr(self) -> float:
        return float(self.verl_engine.optimizer.param_groups[0]["lr"])

    # -- weights --------------------------------------------------------------------------

    def named_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full (unsharded) tensors under the Hugging Face parameter names."""
        params, _ = self.verl_engine.get_per_tensor_param()
        for name, tensor in params:
            yield name, tensor.detach()

    def save_checkpoint(self, path: str | Path, step: int) -> None:
        self.verl_engine.save_checkpoint(str(path), global_step=step)

    def load_checkpoint(self, path: str | Path) -> None:
        self.verl_engine.load_checkpoint(str(path), del_local_after_load=False)
