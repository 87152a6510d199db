"""The update's memory settings resolved for the machine (agentr1.trainer.policy.memory_budget): "auto" keeps verl's
values on a GPU and sizes the token budgets to the memory available on the CPU; a value the user sets is kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentr1.trainer.config import JobConfig
from agentr1.trainer.loop import policy_config
from agentr1.trainer.policy import PolicyConfig
from agentr1.trainer.policy import memory_budget as mb

GIB = 2**30
SMOLLM2 = {"vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
           "num_attention_heads": 9, "num_key_value_heads": 3, "tie_word_embeddings": True}
SMOLLM2_SHAPE = mb.ModelShape.from_config(SMOLLM2, params=134_515_008)
QWEN05 = mb.ModelShape.from_config({"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
                                    "num_hidden_layers": 24, "tie_word_embeddings": True}, params=494_032_768)
AUTO = {"ppo_max_token_len_per_gpu": "auto", "ppo_infer_max_token_len_per_gpu": "auto",
        "gradient_checkpointing": "auto", "entropy_checkpointing": "auto", "param_dtype": "auto"}


def cpu_plan(available_gib: float, shape: mb.ModelShape = SMOLLM2_SHAPE, **settings: object) -> mb.MemoryPlan:
    return mb.plan_memory({**AUTO, **settings}, device="cpu", shape=shape, available=int(available_gib * GIB),
                          source="test")


def test_on_a_gpu_auto_keeps_verls_values_and_set_values_stay() -> None:
    plan = mb.plan_memory(AUTO, device="cuda", shape=SMOLLM2_SHAPE)
    assert (plan.ppo_max_token_len_per_gpu, plan.ppo_infer_max_token_len_per_gpu) == (8192, 8192)
    assert (plan.gradient_checkpointing, plan.entropy_checkpointing) == (False, False)
    assert plan.available_gb is None and set(plan.auto) == set(mb.PLANNED)
    plan = mb.plan_memory({**AUTO, "ppo_max_token_len_per_gpu": 4096, "gradient_checkpointing": True}, device="cuda",
                          shape=None)
    assert (plan.ppo_max_token_len_per_gpu, plan.ppo_infer_max_token_len_per_gpu, plan.gradient_checkpointing) == (
        4096, 4096, True)
    assert "ppo_max_token_len_per_gpu" not in plan.auto


def test_on_the_cpu_the_budget_follows_the_memory_available() -> None:
    budgets = [cpu_plan(gib).ppo_max_token_len_per_gpu for gib in (4, 6, 8, 12, 24, 64)]
    assert budgets == sorted(budgets) and budgets[0] == mb.MIN_TOKENS and budgets[-1] == mb.GPU_TOKENS
    assert all(b % mb.TOKEN_STEP == 0 for b in budgets)
    plan = cpu_plan(8)
    assert plan.gradient_checkpointing and plan.entropy_checkpointing  # the CPU's defaults
    # the whole estimated peak stays within the share of the memory the plan may use, unless at the floor
    for gib in (6, 8, 12, 24):
        plan = cpu_plan(gib)
        assert plan.estimated_peak_gb is not None and plan.available_gb == gib
        if plan.ppo_max_token_len_per_gpu > mb.MIN_TOKENS:
            assert plan.estimated_peak_gb <= gib * mb.USABLE_SHARE + 1e-6
    # the log-prob passes keep no activations for a backward pass: at least the update's budget, often more
    assert cpu_plan(8).ppo_infer_max_token_len_per_gpu > cpu_plan(8).ppo_max_token_len_per_gpu


def test_the_budget_is_room_over_bytes_per_token() -> None:
    """8 GiB: 60% of it, less the runtime and the policy's 16 bytes a parameter, over one token's estimate."""
    room = int(8 * GIB * mb.USABLE_SHARE) - mb.RUNTIME_BYTES - 16 * SMOLLM2_SHAPE.params
    per_token = mb.token_bytes(SMOLLM2_SHAPE, checkpointing=True)
    assert cpu_plan(8).ppo_max_token_len_per_gpu == room // per_token // mb.TOKEN_STEP * mb.TOKEN_STEP
    # a token without checkpointing keeps every layer's activations: more bytes, a smaller budget from the same room
    assert mb.token_bytes(SMOLLM2_SHAPE, checkpointing=False) > 1.5 * per_token
    assert cpu_plan(12, gradient_checkpointing=False).ppo_max_token_len_per_gpu < cpu_plan(12).ppo_max_token_len_per_gpu
    # bigger vocabularies and models cost more per token and hold more
    assert mb.token_bytes(QWEN05, checkpointing=True) > 2 * per_token
    assert cpu_plan(16, QWEN05).ppo_max_token_len_per_gpu < cpu_plan(16).ppo_max_token_len_per_gpu
    # a reference model and a critic hold memory of their own
    assert (cpu_plan(8, use_kl_loss=True, critic=True).ppo_max_token_len_per_gpu
            < cpu_plan(8).ppo_max_token_len_per_gpu)


def test_what_the_user_sets_is_kept_on_the_cpu() -> None:
    plan = cpu_plan(4, ppo_max_token_len_per_gpu=4096, gradient_checkpointing=False, entropy_checkpointing=False)
    assert (plan.ppo_max_token_len_per_gpu, plan.gradient_checkpointing, plan.entropy_checkpointing) == (4096, False,
                                                                                                        False)
    assert plan.auto == ("ppo_infer_max_token_len_per_gpu",)
    assert plan.ppo_infer_max_token_len_per_gpu == 4096  # the log-prob passes follow a budget the user set (verl)
    plan = cpu_plan(64, ppo_infer_max_token_len_per_gpu=512)
    assert (plan.ppo_max_token_len_per_gpu, plan.ppo_infer_max_token_len_per_gpu) == (mb.GPU_TOKENS, 512)


def test_the_plan_is_logged_and_reported() -> None:
    plan = cpu_plan(8)
    metrics = plan.metrics()
    assert metrics["memory/ppo_max_token_len_per_gpu"] == plan.ppo_max_token_len_per_gpu
    assert metrics["memory/gradient_checkpointing"] == 1.0 and metrics["memory/available_gb"] == 8.0
    assert "memory/estimated_peak_gb" in metrics
    text = plan.describe()
    assert f"ppo_max_token_len_per_gpu={plan.ppo_max_token_len_per_gpu} (auto)" in text and "8.0 GiB available" in text


def test_model_shape_counts_the_parameters_in_the_safetensors_headers(tiny_model_path: Path) -> None:
    from safetensors.torch import load_file

    shape = mb.ModelShape.from_model(tiny_model_path)
    assert shape.params == sum(t.numel() for t in load_file(tiny_model_path / "model.safetensors").values())
    config = json.loads((tiny_model_path / "config.json").read_text())
    assert (shape.vocab_size, shape.hidden_size, shape.layers) == (config["vocab_size"], config["hidden_size"],
                                                                   config["num_hidden_layers"])
    # a vision-language model's decoder is its text_config
    vlm = mb.ModelShape.from_config({"text_config": SMOLLM2, "vision_config": {"hidden_size": 32}})
    assert (vlm.vocab_size, vlm.layers) == (49152, 30) and vlm.params > 0


def test_available_memory_takes_a_users_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTR1_MEMORY_GB", "6.5")
    assert mb.available_memory() == (int(6.5 * GIB), "AGENTR1_MEMORY_GB")
    monkeypatch.delenv("AGENTR1_MEMORY_GB")
    available, source = mb.available_memory()
    assert source in ("MemAvailable", "cgroup") and available is not None and available > 0


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_cgroup_limit_counts_its_usage_less_reclaimable_cache(tmp_path: Path, version: str) -> None:
    proc = tmp_path / "cgroup"
    if version == "v2":
        proc.write_text("0::/jobs/job1\n")
        group, names = tmp_path / "jobs" / "job1", ("memory.max", "memory.current", "inactive_file")
        (tmp_path / "jobs").mkdir()
        (tmp_path / "jobs" / "memory.max").write_text("max\n")  # the parent: no limit
    else:
        proc.write_text("4:memory:/jobs/job1\n3:cpuset:/\n")
        group, names = tmp_path / "memory" / "jobs" / "job1", ("memory.limit_in_bytes", "memory.usage_in_bytes",
                                                               "total_inactive_file")
        (tmp_path / "memory" / "jobs").mkdir(parents=True)
        (tmp_path / "memory" / "jobs" / "memory.limit_in_bytes").write_text(str(2**63 - 4096))  # v1's "no limit"
        (tmp_path / "memory" / "jobs" / "memory.usage_in_bytes").write_text(str(50 * GIB))
    group.mkdir(parents=True)
    (group / names[0]).write_text(str(8 * GIB))
    (group / names[1]).write_text(str(3 * GIB))
    (group / "memory.stat").write_text(f"anon {2 * GIB}\n{names[2]} {GIB}\n")
    assert mb._cgroup_available(root=tmp_path, proc=proc) == 6 * GIB  # 8 - (3 - 1)
    proc.write_text("0::/\n" if version == "v2" else "4:memory:/\n")
    assert mb._cgroup_available(root=tmp_path, proc=proc) is None  # no limit anywhere


def test_the_policy_settings_resolve_where_the_policy_is_built(tiny_model_path: Path) -> None:
    config = policy_config(JobConfig.model_validate({"agent": {"entrypoint": "m:f"}}))  # a job that sets nothing
    assert config.ppo_max_token_len_per_gpu == "auto" and config.gradient_checkpointing == "auto"
    resolved, plan = mb.resolve_memory_settings(config, "cpu", tiny_model_path)
    assert resolved.ppo_max_token_len_per_gpu == plan.ppo_max_token_len_per_gpu >= mb.MIN_TOKENS
    assert resolved.gradient_checkpointing is True and resolved.entropy_checkpointing is True
    on_gpu, _ = mb.resolve_memory_settings(config, "cuda", tiny_model_path)
    assert (on_gpu.ppo_max_token_len_per_gpu, on_gpu.gradient_checkpointing) == (8192, False)
    # a job's own values pass through untouched; a CLI override reads as a number
    job = JobConfig.model_validate({"agent": {"entrypoint": "m:f"}, "actor_rollout_ref": {"actor": {
        "ppo_max_token_len_per_gpu": 1024, "gradient_checkpointing": False}}})
    kept, _ = mb.resolve_memory_settings(policy_config(job), "cpu", tiny_model_path)
    assert (kept.ppo_max_token_len_per_gpu, kept.gradient_checkpointing) == (1024, False)
    # verl never sees "auto"
    from agentr1.trainer.policy.verl_model import verl_configs

    with pytest.raises(ValueError, match="resolve them for the device first"):
        verl_configs(tiny_model_path, role="actor", config=PolicyConfig(), device="cpu")


@pytest.mark.parametrize("bad", [0, -5, "lots", True])
def test_a_budget_is_auto_or_a_positive_integer(bad: object) -> None:
    with pytest.raises(ValueError, match="ppo_max_token_len_per_gpu must be 'auto' or an integer"):
        PolicyConfig(ppo_max_token_len_per_gpu=bad).validate()  # type: ignore[arg-type]
