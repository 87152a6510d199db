"""bfloat16 jobs on a CPU without bfloat16 matrix products run in float32, for `agentr1 train` and `agentr1 eval`
alike (one rule, at job loading): an evaluation serves in the dtype its job trains in."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentr1.cli.train import load_job
from agentr1.trainer import cpu_dtypes
from agentr1.trainer.config import JobConfig
from agentr1.trainer.cpu_dtypes import fit_dtypes_to_cpu

DEMO = str(Path(__file__).resolve().parents[2] / "examples" / "chains" / "demo.yaml")
NATIVE = "flags\t\t: fpu avx2 avx512f avx512_bf16\n"
EMULATED = "flags\t\t: fpu avx2 avx512f avx512bw\n"


def _dtypes(job: JobConfig) -> tuple[str, str]:
    return job.actor_rollout_ref.rollout.engine.dtype, job.actor_rollout_ref.actor.param_dtype


def test_a_bfloat16_job_runs_in_float32_only_where_the_cpu_would_emulate_bfloat16():
    job = JobConfig.from_yaml(DEMO, [])
    assert _dtypes(job) == ("bfloat16", "bf16")
    assert _dtypes(fit_dtypes_to_cpu(job, cpuinfo=EMULATED)) == ("float32", "fp32")
    assert _dtypes(job) == ("bfloat16", "bf16")  # a copy: the loaded job is left as it was
    assert fit_dtypes_to_cpu(job, cpuinfo=NATIVE) is job
    on_gpu = JobConfig.from_yaml(DEMO, ["trainer.device=cuda"])
    assert fit_dtypes_to_cpu(on_gpu, cpuinfo=EMULATED) is on_gpu
    half = JobConfig.from_yaml(DEMO, ["actor_rollout_ref.actor.param_dtype=fp32"])
    assert _dtypes(fit_dtypes_to_cpu(half, cpuinfo=EMULATED)) == ("float32", "fp32")


@pytest.mark.parametrize(("native", "expected"), [(True, ("bfloat16", "bf16")), (False, ("float32", "fp32"))])
def test_train_and_eval_load_the_job_through_the_rule(monkeypatch, native, expected):
    monkeypatch.setattr(cpu_dtypes, "cpu_has_bfloat16_matmuls", lambda cpuinfo=None: native)
    assert _dtypes(load_job(DEMO, [])) == expected  # type: ignore[arg-type]
