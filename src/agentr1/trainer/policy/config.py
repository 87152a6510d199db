"""Settings of the policy being trained, named after verl's config fields.

Each field keeps the leaf name of its verl counterpart (the verl path is in the comment), so a
verl YAML section translates field by field. Loss names are not checked here against a list of
our own: :meth:`PolicyConfig.validate` asks verl's registries, so every policy loss verl
registers (``vanilla``, ``gspo``, ``cispo``, ``clip_cov``, ... and any registered later) passes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from agentr1.trainer.config import OptimConfig

__all__ = ["KL_LOSS_TYPES", "LOSS_AGG_MODES", "PolicyConfig", "verl_actor_config"]

# verl.trainer.ppo.core_algos.kl_penalty_forward; a trailing "+" (e.g. "k3+") uses k2's gradient.
KL_LOSS_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
# verl.trainer.ppo.core_algos.agg_loss
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


@dataclass
class PolicyConfig:
    # -- optimizer: actor_rollout_ref.actor.optim.* -------------------------------------------
    optimizer: str = "AdamW"  # a class in optimizer_impl
    optimizer_impl: str = "torch.optim"
    override_optimizer_config: dict[str, Any] | None = None  # extra constructor arguments (eps, ...)
    lr: float = 1e-6
    weight_decay: float = OptimConfig.model_fields["weight_decay"].default  # the RL job's (one source)
    betas: tuple[float, float] = (0.9, 0.999)
    clip_grad: float = 1.0
    lr_warmup_steps: int = 0
    lr_scheduler_type: Literal["constant", "cosine"] = "constant"
    total_training_steps: int = 1_000_000  # only the cosine schedule reads it
    min_lr_ratio: float | None = None

    # -- policy loss: actor_rollout_ref.actor.* -----------------------------------------------
    loss_mode: str = "vanilla"  # actor.policy_loss.loss_mode: any name in verl's policy-loss registry
    policy_loss: dict[str, Any] = field(default_factory=dict)  # other actor.policy_loss.* (clip_cov_ratio, ...)
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None  # None: clip_ratio
    clip_ratio_high: float | None = None  # None: clip_ratio
    clip_ratio_c: float = 3.0  # dual-clip lower bound for negative advantages
    loss_agg_mode: str = "token-mean"
    loss_scale_factor: int | None = None
    entropy_coeff: float = 0.0
    calculate_entropy: bool = True  # report actor/entropy even when entropy_coeff == 0
    use_kl_loss: bool = False  # KL to the frozen reference model, in the loss
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    tau_pos: float = 1.0  # sapo
    tau_neg: float = 1.05  # sapo

    # -- batching: actor.ppo_* ------------------------------------------------------------------
    ppo_epochs: int = 1
    ppo_mini_batch_size: int | None = None  # rows per optimizer step; None: the whole batch
    ppo_micro_batch_size_per_gpu: int | None = None  # rows per forward; None: token budget below
    # token budget per forward of the update (verl's use_dynamic_bsz); "auto": 8,192 on a GPU, on the CPU sized to
    # the memory available (agentr1.trainer.policy.memory_budget)
    ppo_max_token_len_per_gpu: int | Literal["auto"] = "auto"
    # token budget per forward of the log-prob passes (no gradient); "auto": the update's on a GPU, sized on the CPU
    ppo_infer_max_token_len_per_gpu: int | Literal["auto"] = "auto"
    shuffle: bool = False
    data_loader_seed: int = 42

    # -- old log-probs and rollout correction: algorithm.rollout_correction.* -------------------
    # bypass_mode: old_log_probs := the serving engine's log-probs (no recomputation pass).
    # Otherwise the actor recomputes old_log_probs before the update, and the rollout log-probs
    # feed verl's rollout correction: rollout_is ("token" | "sequence") -> rollout_is_weights,
    # rollout_rs (e.g. "token_k1") -> tokens rejected from response_mask.
    bypass_mode: bool = False
    rollout_is: str | None = None
    rollout_is_threshold: float | str = 2.0
    rollout_is_batch_normalize: bool = False
    rollout_rs: str | None = None
    rollout_rs_threshold: float | str | None = None

    # -- critic: critic.* (built only when enabled) --------------------------------------------
    critic: bool = False
    critic_model_path: str | None = None  # None: initialised from the policy model (new value head)
    critic_lr: float = 1e-5
    critic_warmup_steps: int = 0
    cliprange_value: float = 0.5
    critic_loss_agg_mode: str = "token-mean"

    # -- runtime --------------------------------------------------------------------------------
    device: str = "auto"  # "auto" | "cpu" | "cuda"
    param_dtype: Literal["auto", "fp32", "bf16"] = "auto"  # compute dtype; auto: fp32 on CPU, bf16 on CUDA
    # recompute each layer's activations in the backward pass; "auto": on the CPU only (memory_budget)
    gradient_checkpointing: bool | Literal["auto"] = "auto"
    # the entropy (actor/entropy) recomputed in the backward pass instead of keeping its softmax over the vocabulary
    # (nothing to recompute without an entropy_coeff); "auto": on the CPU only
    entropy_checkpointing: bool | Literal["auto"] = "auto"
    remove_padding: bool | None = None  # packed sequences; None: only with flash-attn on CUDA
    attn_implementation: str | None = None  # None: flash_attention_2 when usable, else sdpa
    use_torch_compile: bool | None = None  # None: on CUDA only
    seed: int = 42

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None = None, **overrides: Any) -> PolicyConfig:
        """Build from a (YAML) mapping; unknown keys fail listing the known ones."""
        values = {**(data or {}), **overrides}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown policy settings {unknown}; known: {sorted(known)}")
        if "betas" in values:
            values["betas"] = tuple(values["betas"])
        return cls(**values)

    def replace(self, **changes: Any) -> PolicyConfig:
        return dataclasses.replace(self, **changes)

    def validate(self) -> None:
        """Check names against verl's registries; raise ValueError listing the valid ones."""
        from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

        valid_losses = sorted(POLICY_LOSS_REGISTRY)
        if self.loss_mode not in POLICY_LOSS_REGISTRY:
            raise ValueError(f"unknown loss_mode {self.loss_mode!r}; verl's policy losses: {valid_losses}")
        if self.loss_mode == "bypass_mode":
            raise ValueError("loss_mode 'bypass_mode' is selected through bypass_mode=True, not by name")
        base_kl = self.kl_loss_type.removesuffix("+")
        if base_kl not in KL_LOSS_TYPES:
            raise ValueError(f"unknown kl_loss_type {self.kl_loss_type!r}; valid: {list(KL_LOSS_TYPES)} (+ '+')")
        for name in ("loss_agg_mode", "critic_loss_agg_mode"):
            if getattr(self, name) not in LOSS_AGG_MODES:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; valid: {list(LOSS_AGG_MODES)}")
        if self.rollout_is is not None and self.rollout_is not in ("token", "sequence"):
            raise ValueError(f"rollout_is must be 'token', 'sequence' or None, not {self.rollout_is!r}")
        if (self.rollout_is or self.rollout_rs) and self.bypass_mode:
            raise ValueError("rollout_is / rollout_rs compare recomputed and rollout log-probs: not with bypass_mode")
        if self.ppo_epochs < 1:
            raise ValueError("ppo_epochs must be >= 1")
        for name in ("ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None")
        for name in ("ppo_max_token_len_per_gpu", "ppo_infer_max_token_len_per_gpu"):
            value = getattr(self, name)
            if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be 'auto' or an integer >= 1, not {value!r}")
        for name in ("gradient_checkpointing", "entropy_checkpointing"):
            if getattr(self, name) not in ("auto", True, False):
                raise ValueError(f"{name} must be 'auto', true or false, not {getattr(self, name)!r}")
        if self.clip_ratio_c <= 1.0:
            raise ValueError("clip_ratio_c must be > 1 (dual-clip PPO)")


def verl_actor_config(config: PolicyConfig) -> Any:
    """verl's ``FSDPActorConfig`` (what ``ppo_loss`` and the policy-loss functions read), built from ``config``: every
    field of ours that verl's actor config declares passes under its own name (None: verl's default), so a verl actor
    field added here reaches verl without another line. Set here: what verl spells otherwise (``policy_loss`` is its
    own object holding ``loss_mode``, ``grad_clip`` is our optimizer's ``clip_grad``) or what follows from our
    settings (one-sided clip ratios default to ``clip_ratio``, dynamic batching without a micro-batch size)."""
    from verl.workers.config import FSDPActorConfig, PolicyLossConfig

    shared = {f.name for f in dataclasses.fields(FSDPActorConfig)} & {f.name for f in dataclasses.fields(config)}
    # None, and "auto" not yet resolved for a device (memory_budget): verl's default
    values = {name: getattr(config, name) for name in shared if getattr(config, name) not in (None, "auto")}
    values.update(
        strategy="fsdp2",
        rollout_n=1,
        use_dynamic_bsz=config.ppo_micro_batch_size_per_gpu is None,
        clip_ratio_low=config.clip_ratio if config.clip_ratio_low is None else config.clip_ratio_low,
        clip_ratio_high=config.clip_ratio if config.clip_ratio_high is None else config.clip_ratio_high,
        policy_loss=PolicyLossConfig(loss_mode=config.loss_mode, **config.policy_loss),
        grad_clip=config.clip_grad,
        use_torch_compile=False,  # the loss runs uncompiled; the model's own compilation is verl_configs'
    )
    return FSDPActorConfig(**values)
