"""Running verl's FSDP engine in this process: device choice, a "cpu" platform, the process group.

verl 0.9.1 resolves its accelerator platform once per process (``verl.plugin.platform``) and ships
none for CPU (it falls back to CUDA); some of its modules read the device name at import time
(``verl.workers.engine.fsdp.transformer_impl``). So :func:`prepare_verl` must run before
``verl.workers`` is imported: it registers :class:`PlatformCPU` under the name ``"cpu"`` (the
same class that ``VERL_USE_EXTERNAL_MODULES=agentr1.trainer.policy._platform VERL_PLATFORM=cpu``
loads in a process started by verl), selects it when the device is the CPU, registers verl's FSDP
engines for that device, and starts a world-size-1 process group (gloo on CPU, nccl on CUDA).

Two narrow shims apply only where verl assumes flash-attn: value models load with the configured
attention instead of a hard-coded ``flash_attention_2``, and token log-probs are computed a block
of rows at a time instead of verl's one-token-at-a-time fallback loop (same formula).
"""

from __future__ import annotations

import logging
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from .memory import pin_mmap_threshold

log = logging.getLogger(__name__)

_prepared: str | None = None


def resolve_device(device: str) -> str:
    """``"auto"`` -> ``"cuda"`` when a GPU is visible, else ``"cpu"``; otherwise the name itself."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', not {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA device is visible")
    return device


class _CPUDeviceModule(types.ModuleType):
    """``torch.cpu`` plus the ``torch.cuda``-style calls verl makes on its device module."""

    def __init__(self) -> None:
        super().__init__("agentr1_cpu_device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def memory_allocated(*_: Any, **__: Any) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def mem_get_info(*_: Any, **__: Any) -> tuple[int, int]:
        try:
            pages, size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
            total = os.sysconf("SC_PHYS_PAGES") * size
            return pages * size, total
        except (ValueError, OSError):
            return 0, 0

    @staticmethod
    def get_device_name(*_: Any, **__: Any) -> str:
        return "cpu"

    @staticmethod
    def empty_cache() -> None:
        return None

    ipc_collect = reset_peak_memory_stats = empty_cache

    @staticmethod
    def set_per_process_memory_fraction(*_: Any, **__: Any) -> None:
        return None

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_rng_state(*_: Any, **__: Any) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, *_: Any, **__: Any) -> None:
        torch.set_rng_state(state)


_CPU_DEVICE_MODULE = _CPUDeviceModule()


def _platform_class() -> type:
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry

    existing = PlatformRegistry.get("cpu")
    if existing is not None:
        return existing

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        """verl platform for plain CPU training (gloo, no device memory, no profiler)."""

        device_name = "cpu"
        vendor_name = "cpu"
        device_module = _CPU_DEVICE_MODULE

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return False  # never auto-detected: chosen explicitly

        def current_device(self) -> Any:
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str) -> Iterator[None]:
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "CPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    return PlatformCPU


def _register_engines_for(device: str) -> None:
    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl as fsdp

    for model_type, cls in (
        ("language_model", fsdp.FSDPEngineWithLMHead),
        ("value_model", fsdp.FSDPEngineWithValueHead),
    ):
        registered = EngineRegistry._engines.get(model_type, {})
        missing = [b for b in ("fsdp", "fsdp2") if device not in registered.get(b, {})]
        if missing:
            EngineRegistry.register(model_type=model_type, backend=missing, device=device)(cls)


def _patch_value_head_attention() -> None:
    """verl loads value models with ``attn_implementation="flash_attention_2"`` hard-coded; without
    flash-attn installed (any CPU, many GPUs) load them with the configured attention instead."""
    import importlib.util

    import verl.utils.model as verl_model

    if importlib.util.find_spec("flash_attn") is not None or hasattr(verl_model, "_agentr1_patched"):
        return

    def load_valuehead_model(local_path: str, torch_dtype: Any, model_config: Any, trust_remote_code: bool) -> Any:
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification.from_pretrained(
            local_path,
            torch_dtype=torch_dtype,
            config=model_config,
            attn_implementation=getattr(model_config, "_attn_implementation", None) or "sdpa",
            trust_remote_code=trust_remote_code,
        )

    verl_model.load_valuehead_model = load_valuehead_model
    setattr(verl_model, "_agentr1_patched", True)  # noqa: B010


def _logprobs_by_blocks(logits: torch.Tensor, labels: torch.Tensor, inplace_backward: bool = True) -> torch.Tensor:
    """verl's ``logprobs_from_logits_v2`` (``x[label] - logsumexp(x)``) a block of rows at a time.

    verl's fallback (no flash-attn cross-entropy kernel) loops over the rows of the packed
    (tokens, vocab) logits one token at a time: thousands of tiny kernels forward and backward,
    most of an update's time on a CPU. Same result, one call per block of ~16M logits."""
    flat = logits.reshape(-1, logits.shape[-1])
    index = labels.reshape(-1, 1)
    picked = flat.gather(-1, index).squeeze(-1).float()
    rows = max(1, (1 << 24) // max(1, flat.shape[-1]))
    lse = [torch.logsumexp(block.float(), dim=-1) for block in flat.split(rows)]
    total = torch.cat(lse) if lse else picked.new_zeros(0)
    return (picked - total).view(labels.shape)


def _patch_logprobs() -> None:
    from verl.utils import torch_functional
    from verl.workers.engine.fsdp import transformer_impl

    if torch_functional.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE or torch_functional.NPU_CROSS_ENTROPY_LOSS_AVAILABLE:
        return
    transformer_impl.logprobs_from_logits = _logprobs_by_blocks


def _init_process_group(device: str) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        if dist.get_world_size() != 1:
            raise RuntimeError(
                f"a process group of world size {dist.get_world_size()} is already initialised: the local "
                "policy runs in one process (use verl's Ray trainer for several)"
            )
        return
    backend = "gloo" if device == "cpu" else "cpu:gloo,cuda:nccl"
    if device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)


def prepare_verl(device: str) -> str:
    """Make verl usable in this process on ``device`` ("auto", "cpu", "cuda"); returns the device.

    Idempotent; a process can only host one device type (verl's platform is a process singleton)."""
    global _prepared
    device = resolve_device(device)
    if _prepared is not None:
        if _prepared != device:
            raise RuntimeError(f"verl is already set up for {_prepared!r} in this process, not {device!r}")
        return device
    pin_mmap_threshold()  # else the heap fragments and memory grows every update (see memory.py)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("VERL_USE_EXTERNAL_PLUGINS", "none")
    import verl  # noqa: F401  (the package init must run first)
    from verl.plugin.platform import platform_manager

    platform_cls = _platform_class()
    current = platform_manager._current_platform
    want = "cpu" if device == "cpu" else "cuda"
    if current is None:
        if device == "cpu":
            platform_manager.set_platform(platform_cls())
    elif current.device_name != want:
        raise RuntimeError(
            f"verl already resolved its platform to {current.device_name!r} in this process; set up the "
            f"policy before anything imports verl.workers, or use device={current.device_name!r}"
        )
    if device == "cpu" and "verl.workers.engine.fsdp.transformer_impl" in sys.modules:
        from verl.workers.engine.fsdp import transformer_impl

        transformer_impl.device_name = "cpu"  # read at import; harmless when it already says cpu
    _register_engines_for(want)
    _patch_value_head_attention()
    _patch_logprobs()
    _init_process_group(device)
    _prepared = device
    log.info("verl ready on %s (platform %s)", device, platform_manager.get_platform().device_name)
    return device


# Loaded by verl itself through VERL_USE_EXTERNAL_MODULES=agentr1.trainer.policy._platform: register
# the platform so that VERL_PLATFORM=cpu resolves.
if "verl" in sys.modules and os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    _platform_class()
