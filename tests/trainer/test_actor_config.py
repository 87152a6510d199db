"""The job's ``actor_rollout_ref.actor`` section reaches verl: passed through by name to the policy's settings
(``loop.policy_config``) and from them to verl's own ``FSDPActorConfig`` (``policy.config.verl_actor_config``),
which ``ppo_loss`` and verl's policy losses read. No field is re-spelt by hand on the way, none is dropped."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agentr1.trainer import loop
from agentr1.trainer.config import ActorConfig, JobConfig
from agentr1.trainer.loop import policy_config
from agentr1.trainer.policy import PolicyConfig
from agentr1.trainer.policy.config import verl_actor_config

# a value other than the default for every field of the YAML actor section
ACTOR = {"optim": {"lr": 3e-5, "weight_decay": 0.1}, "policy_loss": {"loss_mode": "gspo"}, "ppo_mini_batch_size": 4,
         "ppo_micro_batch_size_per_gpu": 2, "ppo_max_token_len_per_gpu": 2048, "ppo_infer_max_token_len_per_gpu": 4096, "ppo_epochs": 3, "clip_ratio": 0.3,
         "use_kl_loss": True, "kl_loss_coef": 0.02, "kl_loss_type": "k3", "entropy_coeff": 0.01,
         "loss_agg_mode": "seq-mean-token-mean", "grad_clip": 0.5, "max_length": 1000, "gradient_checkpointing": True,
         "entropy_checkpointing": False, "param_dtype": "bf16", "skip_zero_advantage": False}
ENGINE_NAME = {"grad_clip": "clip_grad"}


def job(**actor: Any) -> JobConfig:
    return JobConfig.model_validate({"agent": {"entrypoint": "m:f"}, "actor_rollout_ref": {"actor": actor}})


def test_every_field_of_the_actor_section_reaches_the_policy_settings() -> None:
    assert set(ACTOR) == set(ActorConfig.model_fields)  # a new field must be added above
    settings = policy_config(job(**{**ACTOR, "use_kl_loss": False, "entropy_coeff": 0.0, "skip_zero_advantage": True}))
    settings_kl = policy_config(job(**ACTOR))
    assert (settings.lr, settings.weight_decay, settings.loss_mode) == (3e-5, 0.1, "gspo")
    for name, value in ACTOR.items():
        if name in ("optim", "policy_loss", *loop.TRAINER_ACTOR_FIELDS):
            continue
        assert getattr(settings_kl, ENGINE_NAME.get(name, name)) == value, name
    # 0 batch sizes in the YAML: not set
    assert policy_config(job()).ppo_mini_batch_size is None and policy_config(job()).ppo_micro_batch_size_per_gpu is None


def test_an_actor_field_without_a_policy_setting_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A field the policy does not know is never dropped silently: it must be declared the trainer's own."""
    monkeypatch.setattr(loop, "TRAINER_ACTOR_FIELDS", frozenset({"skip_zero_advantage"}))
    with pytest.raises(ValueError, match=r"\['max_length'\] have no policy setting"):
        policy_config(job())


def test_the_policy_settings_reach_verls_actor_config_under_their_names() -> None:
    from verl.workers.config import FSDPActorConfig

    verl_fields = {f.name: f for f in dataclasses.fields(FSDPActorConfig)}
    shared = sorted(set(verl_fields) & {f.name for f in dataclasses.fields(PolicyConfig)})
    assert {"clip_ratio", "clip_ratio_c", "entropy_coeff", "kl_loss_type", "loss_agg_mode", "tau_pos"} <= set(shared)
    changed: dict[str, Any] = {"clip_ratio": 0.3, "clip_ratio_low": 0.1, "clip_ratio_high": 0.4, "clip_ratio_c": 5.0,
                               "loss_agg_mode": "token-sum", "loss_scale_factor": 7, "entropy_coeff": 0.01,
                               "calculate_entropy": False, "use_kl_loss": True, "kl_loss_coef": 0.02,
                               "kl_loss_type": "k2", "tau_pos": 2.0, "tau_neg": 3.0, "ppo_epochs": 2,
                               "ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 4,
                               "ppo_max_token_len_per_gpu": 1024, "ppo_infer_max_token_len_per_gpu": 3072,
                               "entropy_checkpointing": True, "shuffle": True, "data_loader_seed": 7}
    config = PolicyConfig(**changed, loss_mode="clip_cov", policy_loss={"clip_cov_ratio": 0.001}, clip_grad=0.5)
    actor = verl_actor_config(config)
    for name in shared:
        if name in ("policy_loss", "use_torch_compile"):
            continue
        assert name in changed, f"{name}: give it a value other than the default above"
        assert getattr(actor, name) == changed[name], name
    assert (actor.policy_loss.loss_mode, actor.policy_loss.clip_cov_ratio) == ("clip_cov", 0.001)
    assert (actor.grad_clip, actor.use_dynamic_bsz, actor.use_torch_compile, actor.strategy) == (0.5, False, False,
                                                                                                  "fsdp2")
    # one-sided clip ratios default to clip_ratio; no micro-batch size: batches by the token budget
    default = verl_actor_config(PolicyConfig(clip_ratio=0.25))
    assert (default.clip_ratio_low, default.clip_ratio_high, default.use_dynamic_bsz) == (0.25, 0.25, True)
