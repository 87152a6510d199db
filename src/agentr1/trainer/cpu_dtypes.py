"""bfloat16 on the CPU only where the CPU multiplies it in hardware.

A job may ask for bfloat16 (``actor_rollout_ref.rollout.engine.dtype: bfloat16``, ``actor.param_dtype: bf16``, as
the laptop demo's ``demo.yaml`` does): on a CPU with AVX-512 BF16 or AMX its matrix products run 2.5-3x faster than
float32; on any other CPU bfloat16 is emulated, slower than float32. :func:`fit_dtypes_to_cpu` turns such a job's
bfloat16 into float32 there, and ``agentr1 train`` and ``agentr1 eval`` both load jobs through it
(``agentr1.cli.train.load_job``): an evaluation serves a checkpoint in the dtype its job trains in on this machine.
"""

from __future__ import annotations

import logging
from pathlib import Path

from agentr1.trainer.config import JobConfig

__all__ = ["cpu_has_bfloat16_matmuls", "fit_dtypes_to_cpu", "runs_on_cpu"]

log = logging.getLogger(__name__)


def cpu_has_bfloat16_matmuls(cpuinfo: str | None = None) -> bool:
    """Whether this CPU multiplies bfloat16 matrices in hardware (AVX-512 BF16 or AMX, from the flags of
    ``/proc/cpuinfo``, or of ``cpuinfo``): elsewhere (no such flags, or no ``/proc/cpuinfo``) bfloat16 is
    emulated and slower than float32."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    return "avx512_bf16" in flags or "amx_bf16" in flags


def runs_on_cpu(device: str) -> bool:
    """Whether ``trainer.device`` puts the job on the CPU (``auto``: when no CUDA device is there)."""
    if device == "auto":
        import torch

        return not torch.cuda.is_available()
    return device.split(":")[0] == "cpu"


def fit_dtypes_to_cpu(job: JobConfig, *, cpuinfo: str | None = None) -> JobConfig:
    """``job``, or a copy with its bfloat16 engine and update in float32 when the job runs on a CPU without bfloat16
    matrix products (:func:`cpu_has_bfloat16_matmuls`; ``cpuinfo``: that CPU's ``/proc/cpuinfo`` text)."""
    rollout, actor = job.actor_rollout_ref.rollout, job.actor_rollout_ref.actor
    asks = rollout.engine.dtype == "bfloat16" or actor.param_dtype == "bf16"
    if not asks or not runs_on_cpu(job.trainer.device) or cpu_has_bfloat16_matmuls(cpuinfo):
        return job
    log.warning("this CPU has no bfloat16 matrix products (AVX-512 BF16 / AMX): the job's bfloat16 engine and update "
                "run in float32 (emulated bfloat16 is slower)")
    fitted = job.model_copy(deep=True)
    if rollout.engine.dtype == "bfloat16":
        fitted.actor_rollout_ref.rollout.engine = rollout.engine.model_copy(update={"dtype": "float32"})
    if actor.param_dtype == "bf16":
        fitted.actor_rollout_ref.actor.param_dtype = "fp32"
    return fitted
