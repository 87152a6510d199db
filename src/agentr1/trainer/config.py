"""The training job definition: typed, loadable from YAML, with verl's names where verl has one
(`data.train_batch_size`, `actor_rollout_ref.rollout.n`, `actor_rollout_ref.actor.optim.lr`,
`actor_rollout_ref.actor.policy_loss.loss_mode`, `algorithm.adv_estimator`,
`trainer.total_training_steps`, `trainer.save_freq`, `trainer.test_freq`,
`trainer.default_local_dir`). Unknown keys are errors, so a typo never silently does nothing."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentr1.engine import EngineOptions
from agentr1.gateway import RENAMED, LaunchSettings

__all__ = [
    "DEFAULT_LAYOUT",
    "RENAMED_ENGINE_KEYS",
    "RUBRIC_FIELDS",
    "ActorConfig",
    "ActorRolloutRefConfig",
    "AgentConfig",
    "AlgorithmConfig",
    "CriticOptimConfig",
    "CriticSection",
    "DataConfig",
    "DistillConfig",
    "JobConfig",
    "JudgeConfig",
    "Layout",
    "OptimConfig",
    "PolicyLossConfig",
    "RewardSection",
    "RolloutConfig",
    "StoreSelection",
    "TrackingOptions",
    "TrainerSection",
    "ValidationSampling",
    "check_rubric",
    "load_yaml",
]

# How a session's steps become training rows (agentr1.trainer.batch): one row per step, or prefix-merged
# rows. The RL job, the SFT job and BatchConfig share this default; "merged" is what every job ran by default.
Layout = Literal["merged", "per_step"]
DEFAULT_LAYOUT: Layout = "merged"


def load_yaml(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """A YAML config as a dict, with ``key.sub=value`` overrides (verl/Hydra style) applied."""
    raw = yaml.safe_load(Path(path).read_text()) or {}
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"override {item!r} must look like key.sub=value")
        node = raw
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return raw


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentConfig(_Strict):
    """What to run per task: a Python function ``module:function`` (sync or async, taking the task
    dict, using any OpenAI-compatible client; may return a reward) or a command for the runner."""

    entrypoint: str | None = None
    command: list[str] | None = None
    timeout_s: float = 300.0
    # The gateway context policy of every rollout session (what the model sees, o_{t+1} = C(z_0..z_t)),
    # e.g. {"policy": "sliding_window", "keep_last_turns": 2}; None = the gateway's default.
    context: str | dict[str, Any] | None = None
    # Worker processes that run the `entrypoint` agent's sessions (1: in the trainer's process). More keep
    # the agents' Python off the GIL of the embedded gateway (agentr1.trainer.agent_processes).
    processes: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _one_kind(self) -> AgentConfig:
        if (self.entrypoint is None) == (self.command is None):
            raise ValueError("agent needs exactly one of `entrypoint` (module:function) or `command`")
        if self.processes > 1 and self.command is not None:
            raise ValueError("agent.processes applies to `entrypoint` agents (a `command` runs in a process of "
                             "its own already)")
        if self.context is not None:
            if self.command is not None:
                raise ValueError("agent.context applies to `entrypoint` agents (the runner of a `command` "
                                 "creates its session itself)")
            from agentr1.gateway import build_policy  # validated at load, not once per rollout

            self.context = build_policy(self.context).config
        return self


class DataConfig(_Strict):
    """Tasks: JSONL/parquet files (one task per row; Agent-R1 rows with `prompt`, `agent_name`,
    `reward_model`, `env_kwargs` work too), or a generator ``module:function(split, n, seed, **generator_kwargs)``.

    Three splits: ``train`` (what the policy learns from), ``val`` (held out; for choosing settings: the trainer's
    evaluations) and ``test`` (held out from both; for claims: ``agentr1 eval --split test``). A recipe keeps them
    disjoint by construction (its generator, or its files)."""

    train_files: list[str] = Field(default_factory=list)
    val_files: list[str] = Field(default_factory=list)
    test_files: list[str] = Field(default_factory=list)
    generator: str | None = None
    generator_kwargs: dict[str, Any] = Field(default_factory=dict)  # keyword arguments of every generator call
    train_size: int = 1000  # tasks a generator makes for training
    val_size: int = 50
    test_size: int | None = None  # None: as many as val_size
    train_batch_size: int = 8  # tasks per training step (verl's data.train_batch_size)
    shuffle: bool = True
    seed: int = 0


class StoreSelection(_Strict):
    """Offline training on sessions already in a store (collected earlier, served by anyone)."""

    db: str
    run_id: str | None = None
    statuses: list[str] = Field(default_factory=lambda: ["finished"])
    min_policy_version: int | None = None
    max_policy_version: int | None = None
    created_after: str | None = None  # ISO timestamp
    created_before: str | None = None


RUBRIC_FIELDS = frozenset({"task", "reference", "answer", "max_score", "step"})  # what a judge rubric may name


def check_rubric(template: str) -> None:
    """Raise ValueError if the template names fields other than :data:`RUBRIC_FIELDS`."""
    names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    unknown = names - RUBRIC_FIELDS
    if unknown or "" in names:
        raise ValueError(f"reward.judge.rubric uses unknown fields {sorted(unknown or {'{}'})}; "
                         f"available: {sorted(RUBRIC_FIELDS)}")


class JudgeExample(_Strict):
    """A worked example for the judge (small judge models copy the reply format from these)."""

    answer: str
    score: float
    task: str = ""
    reference: str = ""


class JudgeConfig(_Strict):
    """An LLM judge as a reward function (agentr1.trainer.judge): the rubric prompt goes to ``model`` at
    ``base_url`` (a second agentr1 gateway, or any OpenAI-compatible endpoint); the reply's
    ``SCORE: <n>`` line, n in [0, max_score], is the reward (scaled to [0, 1], times ``weight``)."""

    base_url: str  # e.g. http://127.0.0.1:8001/v1
    model: str = "judge"
    api_key: str | None = None
    name: str = "judge"  # the reward's name in the store
    mode: Literal["outcome", "process"] = "outcome"  # one score per session, or one per trainable step
    rubric: str | None = None  # a template with {task} {reference} {answer} {max_score} {step}; None: the default
    # few-shot turns before the real one: the rubric filled with each example, answered "SCORE: <score>"
    examples: list[JudgeExample] = Field(default_factory=list)
    max_score: float = Field(10.0, gt=0)
    weight: float = 1.0
    temperature: float = 0.0
    max_tokens: int = Field(32, ge=1)
    timeout_s: float = Field(120.0, gt=0)
    max_calls: int | None = Field(None, ge=0)  # judge calls per run (cache hits are free); None: no limit
    over_budget: Literal["error", "skip"] = "error"  # past max_calls: stop the run, or leave sessions unscored

    @model_validator(mode="after")
    def _rubric(self) -> JudgeConfig:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"reward.judge.base_url must be an http(s) URL, got {self.base_url!r}")
        if self.rubric is not None:
            check_rubric(self.rubric)
        bad = [e.score for e in self.examples if not 0 <= e.score <= self.max_score]
        if bad:
            raise ValueError(f"reward.judge.examples scores {bad} are outside [0, max_score={self.max_score}]")
        return self


class RewardSection(_Strict):
    """Environment reward functions ``module:function(session, task) -> float | {step_index: float}``;
    their results are stored as rewards (source "environment") next to those the agent reported.
    ``judge``: an LLM judge's score as a reward too (source "judge")."""

    functions: list[str] = Field(default_factory=list)
    outcome_placement: Literal["last", "spread"] = "last"  # the outcome on the last step, or spread over all
    judge: JudgeConfig | None = None


class DistillConfig(_Strict):
    """On-policy distillation: the teacher scores the student's sampled tokens; the per-token
    advantage ``coef * (teacher_logp - student_logp)`` (minus the single-sample reverse KL) replaces
    the task advantages (``alone``) or is added to them."""

    teacher: str  # a local HF model (name or directory, as actor_rollout_ref.model), or the SGLang model id
    backend: Literal["local", "sglang"] = "local"
    url: str | None = None  # the SGLang server (backend "sglang")
    coef: float = 1.0
    alone: bool = True

    @model_validator(mode="after")
    def _url_for_sglang(self) -> DistillConfig:
        if (self.backend == "sglang") != (self.url is not None):
            raise ValueError("algorithm.distill.url is required with backend 'sglang' and only there")
        return self


class RolloutCorrectionConfig(_Strict):
    """verl's ``algorithm.rollout_correction``; of it, ``bypass_mode``: the update takes the serving
    engine's log-probs of the sampled tokens as the behaviour policy's (``old_log_probs``) instead of
    recomputing them with the actor, one forward pass over the batch less. Exact when the serving
    engine computes what the actor would (the embedded engine on the CPU, float32: within ~1e-6); under
    ``trainer.mode: async`` or ``offline`` the PPO ratio against those log-probs is the correction
    (no separate importance weights). Rows whose steps came without log-probs are recomputed."""

    bypass_mode: bool = False


class AlgorithmConfig(_Strict):
    adv_estimator: str = "grpo"
    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std_in_grpo: bool = True
    gigpo_step_weight: float = 1.0
    # raise advantages below this to it (0.0: learn only from samples that beat their group; with
    # actor.skip_zero_advantage the others leave the update). None: as the estimator gives them
    advantage_floor: float | None = None
    layout: Layout = DEFAULT_LAYOUT
    # a task group with a failed member (agentr1.trainer.groups): drop it, or run the missing samples again
    incomplete_groups: Literal["drop", "resample"] = "drop"
    resample_attempts: int = Field(1, ge=1)  # rounds of resampling before an incomplete group is dropped
    distill: DistillConfig | None = None  # on-policy distillation from a teacher (agentr1.trainer.distill)
    rollout_correction: RolloutCorrectionConfig = Field(default_factory=RolloutCorrectionConfig)


class ValidationSampling(_Strict):
    """How held-out tasks are evaluated (verl's ``rollout.val_kwargs``; the protocol of
    ``agentr1.trainer.eval_metrics``): a greedy pass (temperature 0, one run a task: ``greedy@1``) and ``n`` sampled
    runs a task at ``temperature`` (None: as the agent / the task rows ask) for ``mean@n``, ``pass@n``, ``maj@n``.
    The gateway applies both to every call of the evaluation's sessions, whatever the agent asks."""

    greedy: bool = True
    n: int = Field(1, ge=0, le=1024)  # 0: no sampled pass
    temperature: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _runs_something(self) -> ValidationSampling:
        if not self.greedy and self.n == 0:
            raise ValueError("val_kwargs: greedy is false and n is 0: the evaluation would run nothing")
        return self


# the engine options a job resolves itself for whichever backend (agentr1 eval serves any job's checkpoint on the
# embedded engine): the device is trainer.device, the batch holds max_concurrency rows unless given
TRAINER_ENGINE_KEYS = frozenset({"device", "max_batch_size"})
# the rollout config's flat keys of earlier releases -> their key under `engine` / `launch`: the gateway's renames
# (agentr1.gateway.settings.RENAMED) of the keys the rollout config had
RENAMED_ENGINE_KEYS = {k: RENAMED[k] for k in ("engine_compile", "prefill_budget", "engine_exact", "cache_gb",
                                               "engine_dtype")}
RENAMED_LAUNCH_KEYS = {k: RENAMED[k] for k in ("launch_servers", "launch_port", "launch_args", "launch_command",
                                               "launch_timeout_s")}


class RolloutConfig(_Strict):
    """Sampling, and where it runs (verl's ``rollout.name``): the embedded engine (``local``) or
    SGLang / vLLM servers behind the trainer's gateway, either running ones (``urls``) or, for
    SGLang, servers the trainer starts and supervises (``launch``: the gateway's launch group, the settings of
    ``agentr1 gateway --launch``). See agentr1.trainer.serving and docs/training.md."""

    n: int = 4
    temperature: float = 1.0
    top_p: float = 1.0
    val_kwargs: ValidationSampling = Field(default_factory=ValidationSampling)  # held-out evaluation's decoding
    max_concurrency: int = 16
    # the trainer process's GIL switch interval while a rollout runs (None: Python's 5 ms): the embedded
    # gateway's loop gives the GIL up at every socket and SQLite call and waits this long at most to take it back
    # from a busy thread (agentr1.core.gil_switch_interval; docs/benchmarks.md, the rollout rows)
    gil_switch_interval_ms: float | None = Field(0.5, gt=0)
    # name local: gateway processes serving the rollout's sessions, sharing the engine process (1: the trainer's own
    # gateway alone). Each takes a share of the sessions' HTTP, rendering and recording work off the one event
    # loop (agentr1.gateway.GatewayShards; docs/benchmarks.md, the rollout rows); more than 1 runs the engine in a
    # process of its own. None: agentr1.trainer.serving.default_gateway_processes (4 on a GPU with 16 cores, 1 on
    # the CPU)
    gateway_processes: int | None = Field(None, ge=1, le=64)
    max_staleness: int = 0  # train on sessions at most this many policy versions old
    # steps sampled at another temperature / top_p than above (agentr1.trainer.groups.check_sampling)
    sampling_check: Literal["error", "warn", "off"] = "error"
    name: Literal["local", "sglang", "vllm"] = "local"
    # how the gateway reads the policy's tool calls (GatewaySettings.tool_call_parser: hermes, json, pythonic,
    # hermes_json); None: the model family's default (agentr1.core.rendering.tool_parsers)
    tool_call_parser: str | None = None
    urls: list[str] = Field(default_factory=list)  # running servers' base URLs (name sglang or vllm)
    # name sglang: servers this job starts, supervises and stops (``launch.enabled``): the gateway's own launch group
    # (``agentr1 gateway --launch``), as it is; ``launch.log_dir`` defaults to the run's ``servers/`` folder
    launch: LaunchSettings = Field(default_factory=LaunchSettings)
    # name sglang: how the policy's weights reach the servers after each update. tensor: from memory
    # (/update_weights_from_tensor: CUDA IPC handles, no file; servers on this machine with one tensor-parallel
    # rank); disk: a HF directory they load (/update_weights_from_disk; any server that can read the path).
    # auto: tensor for servers this job launched or at a loopback address, else disk. vLLM always loads from disk
    weight_sync: Literal["auto", "tensor", "disk"] = "auto"
    # name local (and agentr1 eval): the embedded engine's options, the model of `agentr1 gateway --engine-*`
    # (GatewaySettings.engine), handed to the trainer's gateway as they are. Resolved at load (TRAINER_ENGINE_KEYS):
    # engine.device is trainer.device; engine.max_batch_size, unless given, holds every concurrent rollout
    engine: EngineOptions = Field(default_factory=EngineOptions)

    @property
    def tensor_sync(self) -> bool:
        """Whether the SGLang servers get the weights from memory (:attr:`weight_sync`, ``auto`` resolved)."""
        if self.name != "sglang" or self.weight_sync == "disk":
            return False
        if self.weight_sync == "tensor" or self.launch.enabled:
            return True
        return all(urlsplit(u).hostname in ("127.0.0.1", "localhost", "::1") for u in self.urls)

    @property
    def switch_interval_s(self) -> float | None:
        """:attr:`gil_switch_interval_ms` in seconds."""
        return None if self.gil_switch_interval_ms is None else self.gil_switch_interval_ms / 1000

    @field_validator("tool_call_parser")
    @classmethod
    def _known_parser(cls, name: str | None) -> str | None:
        if name is not None:
            from agentr1.core.rendering import get_tool_call_parser  # lazy: the rendering stack

            get_tool_call_parser(name)
        return name

    @model_validator(mode="before")
    @classmethod
    def _keys_renamed(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        moved = {**RENAMED_ENGINE_KEYS, **RENAMED_LAUNCH_KEYS}
        renamed = sorted(set(data) & moved.keys())
        if renamed:
            raise ValueError(f"actor_rollout_ref.rollout.{renamed[0]} is now "
                             f"actor_rollout_ref.rollout.{moved[renamed[0]]}: rename the key")
        if isinstance(data.get("launch"), bool):
            raise ValueError(f"actor_rollout_ref.rollout.launch is a group now: write `launch: {{enabled: "
                             f"{str(data['launch']).lower()}}}` (actor_rollout_ref.rollout.launch.enabled)")
        return data

    @model_validator(mode="after")
    def _servers(self) -> RolloutConfig:
        launch = self.launch.enabled
        unlaunched = LaunchSettings()  # the options at their defaults (a dumped config writes them all out)
        launch_options = sorted(f"launch.{k}" for k in type(self.launch).model_fields
                                if k != "enabled" and getattr(self.launch, k) != getattr(unlaunched, k))
        defaults = EngineOptions()
        engine_options = [f"engine.{k}" for k in type(self.engine).model_fields
                          if k not in TRAINER_ENGINE_KEYS and getattr(self.engine, k) != getattr(defaults, k)]
        engine_options += ["gateway_processes"] if self.gateway_processes is not None else []
        if engine_options and self.name != "local":
            raise ValueError(f"actor_rollout_ref.rollout.{engine_options[0]} is an option of the embedded engine "
                             f"(name local), not of the {self.name} servers")
        if "max_batch_size" not in self.engine.model_fields_set:  # one decode batch holds every concurrent rollout
            self.engine = self.engine.model_copy(update={"max_batch_size": max(32, self.max_concurrency)})
        if self.name == "local":
            if self.urls or launch:
                raise ValueError("actor_rollout_ref.rollout.urls / launch are for SGLang or vLLM servers: "
                                 "set actor_rollout_ref.rollout.name to sglang or vllm")
        elif self.urls and launch:
            raise ValueError("actor_rollout_ref.rollout: give either `urls` (running servers) or `launch.enabled` "
                             "(start them here), not both")
        elif launch and self.name != "sglang":
            raise ValueError("actor_rollout_ref.rollout.launch starts SGLang servers: it needs name sglang "
                             "(give a vLLM server's address in `urls`)")
        elif not self.urls and not launch:
            raise ValueError(f"actor_rollout_ref.rollout.name {self.name!r} needs the servers: `urls: [http://host:port]`"
                             + (" or `launch: {enabled: true}`" if self.name == "sglang" else ""))
        if self.weight_sync == "tensor" and self.name != "sglang":
            raise ValueError(f"actor_rollout_ref.rollout.weight_sync tensor is for SGLang servers; the {self.name} "
                             "rollout syncs " + ("its engine in memory already" if self.name == "local" else
                                                 "through a directory (weight_sync disk or auto)"))
        if launch_options and not launch:
            raise ValueError(f"actor_rollout_ref.rollout.{', '.join(launch_options)} only apply with "
                             "`launch.enabled: true`")
        bad = [u for u in self.urls if not u.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"actor_rollout_ref.rollout.urls must be http(s) base URLs, not {bad}")
        if self.launch.command is not None and not self.launch.command.strip():
            raise ValueError("actor_rollout_ref.rollout.launch.command is empty")
        return self


class PolicyLossConfig(_Strict):
    loss_mode: str = "vanilla"


class OptimConfig(_Strict):
    """The actor's optimizer. ``weight_decay`` 0.0 is what RL runs always used (the policy's
    ``PolicyConfig`` takes its default from here; SFT declares its own, 0.01, as verl's SFT does)."""

    lr: float = 1e-6
    weight_decay: float = 0.0


class ActorConfig(_Strict):
    optim: OptimConfig = Field(default_factory=OptimConfig)
    policy_loss: PolicyLossConfig = Field(default_factory=PolicyLossConfig)
    ppo_mini_batch_size: int = 0  # rows per optimizer step; 0 = the whole batch
    ppo_micro_batch_size_per_gpu: int = 0  # rows per forward; 0 = batch by ppo_max_token_len_per_gpu
    # tokens per forward of the update and of the log-prob passes; auto: 8,192 on a GPU, on the CPU what the memory
    # available holds (agentr1.trainer.policy.memory_budget, docs/training.md#memory-defaults-that-fit-the-machine)
    ppo_max_token_len_per_gpu: int | Literal["auto"] = "auto"
    ppo_infer_max_token_len_per_gpu: int | Literal["auto"] = "auto"
    ppo_epochs: int = 1
    clip_ratio: float = 0.2
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    entropy_coeff: float = 0.0
    loss_agg_mode: str = "token-mean"
    grad_clip: float = 1.0
    max_length: int = 4096
    # recompute each layer's activations in the backward pass instead of keeping them: the same numbers,
    # less peak memory (the laptop demo's update: 5.4 -> 3.4 GB), ~12% more update compute; auto: on the CPU only
    gradient_checkpointing: bool | Literal["auto"] = "auto"
    # the entropy's softmax over the vocabulary recomputed in the backward pass (with an entropy_coeff); auto: CPU only
    entropy_checkpointing: bool | Literal["auto"] = "auto"
    # the update's compute dtype (the weights and optimizer stay float32); auto: float32 on the CPU, bfloat16 on a
    # GPU. bf16 on a CPU with AVX-512 BF16 / AMX: the matrix products 2.5-3x faster than float32
    param_dtype: Literal["auto", "fp32", "bf16"] = "auto"
    # leave rows whose advantages are zero at every token out of the policy update: without a KL loss or an
    # entropy bonus they carry no gradient, yet they cost compute and, in mini-batches of their own, make
    # optimizer steps that move the weights on momentum alone (DAPO's dynamic-sampling filter, without
    # the refill). The critic still fits every row.
    skip_zero_advantage: bool = False

    @model_validator(mode="after")
    def _zero_advantage_rows_have_no_gradient(self) -> ActorConfig:
        if self.skip_zero_advantage and (self.use_kl_loss or self.entropy_coeff != 0):
            raise ValueError("actor.skip_zero_advantage: rows with zero advantages still carry the KL loss's or the "
                             "entropy bonus's gradient; turn off use_kl_loss and entropy_coeff, or this option")
        return self


class CriticOptimConfig(_Strict):
    lr: float = 1e-5
    lr_warmup_steps: int = Field(0, ge=0)  # linear learning-rate warm-up of the critic's optimizer


class CriticSection(_Strict):
    """The value model of the estimators that need one (gae, steppo); verl's ``critic.*`` names.
    Initialised from the policy model with a new value head."""

    optim: CriticOptimConfig = Field(default_factory=CriticOptimConfig)
    cliprange_value: float = 0.5


class ActorRolloutRefConfig(_Strict):
    model: str = "smollm2"
    actor: ActorConfig = Field(default_factory=ActorConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)


class TrackingOptions(_Strict):
    """Where a job's metrics go, with verl's names (``trainer.logger``, ``project_name``, ``experiment_name``):
    always ``metrics.jsonl`` and ``curves.png`` in the job's folder; ``console`` is the progress line; the other
    backends are verl's ``Tracking`` (``agentr1.trainer.tracking``): TensorBoard in ``<folder>/tensorboard``
    (``TENSORBOARD_DIR`` wins), MLflow at ``MLFLOW_TRACKING_URI`` or ``sqlite:///<folder>/mlflow.db``, wandb
    (``WANDB_MODE=offline`` for no network), SwanLab, ClearML, trackio, verl's JSONL ``file`` logger."""

    logger: list[Literal["console", "tensorboard", "mlflow", "wandb", "swanlab", "clearml", "trackio", "file"]] = (
        Field(default_factory=lambda: ["console", "tensorboard"]))
    project_name: str = "agentr1"
    experiment_name: str | None = None  # None: the job's run_name


class TrainerSection(TrackingOptions):
    total_training_steps: int = 10
    save_freq: int = 0  # 0 = only at the end
    test_freq: int = 0  # 0 = only before and after
    # the split the trainer's own evaluations run on (before, every test_freq steps, after): val, where settings are
    # chosen; test for a run whose before -> after is itself the claim and chooses nothing on it (scripts/demo)
    eval_split: Literal["val", "test"] = "val"
    default_local_dir: str = "out/train"
    device: str = "auto"
    resume: bool = True
    seed: int = 0
    critic_warmup: int = Field(0, ge=0)  # verl's name: the first N steps train only the critic (gae, steppo)
    mode: Literal["sync", "async"] = "sync"  # async: rollouts continue during updates (agentr1.trainer.async_loop)
    # ray: verl's FSDP workers as Ray actors (agentr1.trainer.policy.ray_policy, docs/scale-out.md)
    policy: Literal["local", "ray"] = "local"
    n_gpus_per_node: int = Field(1, ge=1)  # policy ray: workers per node for each model (verl's name)
    nnodes: int = Field(1, ge=1)
    ray_address: str | None = None  # policy ray: a running cluster ("auto" after `ray start`); None: start one here

    @model_validator(mode="before")
    @classmethod
    def _engine_was_renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "engine" in data:
            raise ValueError("trainer.engine was renamed trainer.policy (local | ray): rename the key")
        return data


class JobConfig(_Strict):
    run_name: str = "agentr1"
    db: str = "sqlite:///out/train/traces.db"
    agent: AgentConfig | None = None  # required unless `offline` selects stored sessions
    data: DataConfig = Field(default_factory=DataConfig)
    reward: RewardSection = Field(default_factory=RewardSection)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    actor_rollout_ref: ActorRolloutRefConfig = Field(default_factory=ActorRolloutRefConfig)
    critic: CriticSection = Field(default_factory=CriticSection)
    trainer: TrainerSection = Field(default_factory=TrainerSection)
    offline: StoreSelection | None = None  # set: train on stored sessions instead of rolling out

    @model_validator(mode="after")
    def _agent_or_offline(self) -> JobConfig:
        if self.agent is None and self.offline is None:
            raise ValueError("set `agent` (what to run per task) or `offline` (stored sessions to train on)")
        if self.offline is not None and self.actor_rollout_ref.rollout.name != "local":
            raise ValueError("`offline` trains on stored sessions and serves nothing: leave "
                             "actor_rollout_ref.rollout.name at local")
        self._engine_on_trainer_device()
        if self.trainer.mode == "async":
            if self.offline is not None:
                raise ValueError("trainer.mode 'async' overlaps rollouts with updates: it needs `agent`, not `offline`")
            if self.actor_rollout_ref.rollout.max_staleness < 1:
                raise ValueError("trainer.mode 'async' needs actor_rollout_ref.rollout.max_staleness >= 1: with 0, "
                                 "every group still running during an update would be dropped")
        return self

    def _engine_on_trainer_device(self) -> None:
        """The embedded engine runs where the policy does: ``trainer.device`` (one setting, not two)."""
        rollout = self.actor_rollout_ref.rollout
        if "device" in rollout.engine.model_fields_set and rollout.engine.device != self.trainer.device:
            raise ValueError(f"actor_rollout_ref.rollout.engine.device ({rollout.engine.device}) is trainer.device "
                             f"({self.trainer.device}) in a training job: set trainer.device")
        rollout.engine = rollout.engine.model_copy(update={"device": self.trainer.device})

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> JobConfig:
        """Load ``path`` and apply ``key.sub=value`` overrides (verl/Hydra style)."""
        return cls.model_validate(load_yaml(path, overrides))

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
