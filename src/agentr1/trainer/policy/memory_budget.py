"""The update's memory settings chosen for the machine: what ``"auto"`` means for the policy's memory knobs.

On a GPU ``"auto"`` keeps verl's usual values (8,192 tokens per forward, no gradient checkpointing). On the CPU the
update shares the machine's memory with everything else, and a token budget made for an 80 GB GPU gets the job
killed: SmolLM2-135M at 8,192 tokens per forward without checkpointing needs about 18.5 GiB. There ``"auto"``
means:

- ``gradient_checkpointing`` and ``entropy_checkpointing`` on: each layer keeps only its input for the backward pass
  (recomputing the rest, ~12-19% more update compute), and the entropy (reported, in the loss only with an
  ``entropy_coeff``) keeps nothing over the vocabulary;
- ``ppo_max_token_len_per_gpu`` (tokens per forward of the update) from the memory available now -- the kernel's
  ``MemAvailable``, or what the process's cgroup still allows where that is less, or ``AGENTR1_MEMORY_GB`` where it
  is set -- less what the models and their optimizer hold, divided by an estimate of one token's bytes from the
  model's config (:func:`token_bytes`: logits and their gradient over the vocabulary, activations per layer);
- ``ppo_infer_max_token_len_per_gpu`` (tokens per forward of the log-prob passes, no gradient) the same way from a
  forward's bytes per token, never below the update's; where the user set the update's budget, that one (verl's
  default for it).

A value the user sets is kept. :func:`plan_memory` returns the resolved settings and a :class:`MemoryPlan` that the
policy logs once and reports with every update (``memory/*`` metrics). The estimate was fitted to measured peaks
(``bench/update_peak_bench.py``, docs/training.md#memory-defaults-that-fit-the-machine).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["AUTO", "MemoryPlan", "ModelShape", "available_memory", "forward_token_bytes", "plan_memory",
           "resolve_memory_settings", "token_bytes", "update_bytes"]

log = logging.getLogger(__name__)

AUTO = "auto"
# the policy's settings (verl's names) that "auto" resolves here
PLANNED = ("ppo_max_token_len_per_gpu", "ppo_infer_max_token_len_per_gpu", "gradient_checkpointing",
           "entropy_checkpointing")
GIB = 2**30
GPU_TOKENS = 8192  # verl's token budget per forward on a GPU: what "auto" keeps there
MIN_TOKENS = 256  # never plan a smaller forward: below this the update is all overhead
TOKEN_STEP = 256  # budgets are multiples of this
MAX_INFER_TOKENS = 16384  # a forward without gradient gains nothing from more
# the share of the available memory the update may plan for: the rest is the machine's (the embedded engine's weights
# beside the update, its KV cache in a process of its own, a neighbour's growth) and the padding of a micro-batch to
# its longest row (verl packs rows up to the budget by their real lengths; on the CPU a micro-batch is padded)
USABLE_SHARE = 0.6
# what the process holds beside the models' 16 bytes a parameter: torch, transformers, verl, the tokenizer, the trace
# store, and the optimizer step's own temporaries (measured with SmolLM2: 1.0 GiB)
RUNTIME_BYTES = int(1.25 * GIB)


@dataclass(frozen=True)
class ModelShape:
    """What the memory estimate reads of a model: its parameter count and the shape of its text decoder."""

    params: int
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    layers: int

    @classmethod
    def from_config(cls, config: dict[str, Any], params: int | None = None) -> ModelShape:
        """From a Hugging Face ``config.json`` (a vision-language model's ``text_config``); ``params`` counted from
        the shapes where not given."""
        text = {**config, **config.get("text_config", {})}
        hidden = int(text["hidden_size"])
        shape = cls(params=0, vocab_size=int(text["vocab_size"]), hidden_size=hidden,
                    intermediate_size=int(text.get("intermediate_size") or 4 * hidden),
                    layers=int(text["num_hidden_layers"]))
        if params is None:
            tied = text.get("tie_word_embeddings", True)
            per_layer = 4 * hidden * hidden + 3 * hidden * shape.intermediate_size
            params = shape.vocab_size * hidden * (1 if tied else 2) + shape.layers * per_layer
        return cls(params, shape.vocab_size, hidden, shape.intermediate_size, shape.layers)

    @classmethod
    def from_model(cls, path: str | os.PathLike[str]) -> ModelShape:
        """From a model directory: its ``config.json``, the parameters counted in its safetensors headers."""
        path = Path(path)
        return cls.from_config(json.loads((path / "config.json").read_text()), _safetensors_params(path))


def _safetensors_params(path: Path) -> int | None:
    """Parameters in the directory's ``*.safetensors`` files, from their headers alone (None: no such files)."""
    total, found = 0, False
    for file in sorted(path.glob("*.safetensors")):
        with file.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, info in header.items():
            if name != "__metadata__":
                count = 1
                for dim in info["shape"]:
                    count *= int(dim)
                total += count
                found = True
    return total if found else None


# -- the estimate ----------------------------------------------------------------------------------------------

# One token of a training micro-batch (bench/update_peak_bench.py, SmolLM2-135M, rows of 256 tokens): the
# peak rose 2.04 MiB a token without gradient checkpointing and 0.80 MiB with it (float32; 0.59 MiB in bfloat16),
# linear from 512 to 4,096 tokens. Solved for the two parts: each layer keeps ~46 KiB a token for its backward pass,
# ~0.9 of the 12 hidden-sized and 4 intermediate-sized float32 vectors counted here (norms, q/k/v, attention in and
# out, the MLP's gate, up and product), and the logits over the vocabulary take ~3.7 float32 copies (the logits, the
# copy verl packs them into, their gradients; 2.8 in bfloat16): counted as 4. With checkpointing a layer keeps its
# input alone, and one layer's worth is recomputed at a time.
LOGIT_COPIES = 4.0
LOGIT_COPIES_INFER = 2.0  # a forward without gradient: the logits and the packed copy
ACTIVATION_HIDDEN = 12
ACTIVATION_INTERMEDIATE = 4


def token_bytes(shape: ModelShape, *, checkpointing: bool, bf16: bool = False) -> int:
    """Bytes one token of a training micro-batch adds to the update's peak."""
    width = 2 if bf16 else 4
    layer = (ACTIVATION_HIDDEN * shape.hidden_size + ACTIVATION_INTERMEDIATE * shape.intermediate_size) * width
    activations = (shape.layers * shape.hidden_size * width + layer) if checkpointing else shape.layers * layer
    return int(activations + LOGIT_COPIES * shape.vocab_size * 4)


def forward_token_bytes(shape: ModelShape, *, bf16: bool = False) -> int:
    """Bytes one token of a log-prob forward (no gradient) adds: its logits, and one layer's activations at a time."""
    width = 2 if bf16 else 4
    layer = (ACTIVATION_HIDDEN * shape.hidden_size + ACTIVATION_INTERMEDIATE * shape.intermediate_size) * width
    return int(layer + LOGIT_COPIES_INFER * shape.vocab_size * 4)


def models_bytes(shape: ModelShape, *, bf16: bool = False, reference: bool = False, critic: bool = False) -> int:
    """What the trained models hold at the update's peak: the policy's float32 weights, gradients and Adam's two
    moments (16 bytes a parameter; + 2 for the bfloat16 copy the update computes with), a frozen reference's
    weights, a critic's own 16."""
    per_param = 16 + (2 if bf16 else 0) + (4 if reference else 0) + (16 if critic else 0)
    return shape.params * per_param


def update_bytes(shape: ModelShape, tokens: int, *, checkpointing: bool, bf16: bool = False,
                 reference: bool = False, critic: bool = False) -> int:
    """The process's estimated peak over an update of ``tokens`` tokens per forward."""
    return (RUNTIME_BYTES + models_bytes(shape, bf16=bf16, reference=reference, critic=critic)
            + tokens * token_bytes(shape, checkpointing=checkpointing, bf16=bf16))


# -- what is available -----------------------------------------------------------------------------------------

def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import psutil  # macOS, Windows

        return int(psutil.virtual_memory().available)
    except ImportError:
        return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return None if text in ("", "max") else int(text)


def _inactive_file(path: Path, key: str) -> int:
    """Page cache the kernel can take back from the cgroup (``memory.stat``)."""
    try:
        for line in (path / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _cgroup_available(root: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc/self/cgroup")) -> int | None:
    """What this process's memory cgroup (v2, or v1's memory controller) and its ancestors still allow: the least
    of limit - (usage - reclaimable page cache); None without a limit."""
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        return None
    least: int | None = None
    for line in lines:
        _, controllers, group = line.split(":", 2)
        if controllers == "":  # v2
            base, limit_file, usage_file, cache_key = root, "memory.max", "memory.current", "inactive_file"
        elif "memory" in controllers.split(","):  # v1
            base, limit_file, usage_file, cache_key = root / "memory", "memory.limit_in_bytes", \
                "memory.usage_in_bytes", "total_inactive_file"
        else:
            continue
        parts = [p for p in group.split("/") if p]
        for depth in range(len(parts), -1, -1):
            directory = base.joinpath(*parts[:depth])
            limit, usage = _read_int(directory / limit_file), _read_int(directory / usage_file)
            if limit is None or usage is None or limit >= 1 << 60:  # v1 says "no limit" with a huge number
                continue
            free = limit - max(0, usage - _inactive_file(directory, cache_key))
            least = free if least is None else min(least, free)
    return least


def available_memory() -> tuple[int | None, str]:
    """Bytes this process may still use, and where the number comes from: ``AGENTR1_MEMORY_GB`` (a cap the user
    sets: the job's share of a machine it shares), else the least of ``MemAvailable`` and the cgroup's room."""
    cap = os.environ.get("AGENTR1_MEMORY_GB")
    if cap:
        return int(float(cap) * GIB), "AGENTR1_MEMORY_GB"
    system, group = _meminfo_available(), _cgroup_available()
    if group is not None and (system is None or group < system):
        return group, "cgroup"
    return system, "MemAvailable"


# -- the plan ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MemoryPlan:
    """The memory settings an update runs with, and what chose them."""

    ppo_max_token_len_per_gpu: int
    ppo_infer_max_token_len_per_gpu: int
    gradient_checkpointing: bool
    entropy_checkpointing: bool
    auto: tuple[str, ...]  # the settings that were "auto"
    available_gb: float | None = None  # what the CPU plan saw (None on a GPU)
    source: str = ""  # where that number came from
    estimated_peak_gb: float | None = None  # the update's estimated peak at the chosen budget (CPU)

    def settings(self) -> dict[str, int | bool]:
        """The resolved settings under the policy's (verl's) names."""
        return {name: getattr(self, name) for name in PLANNED}

    def metrics(self) -> dict[str, float]:
        """``memory/*`` of every update: the settings in force (booleans as 0 / 1) and the plan's numbers."""
        out = {f"memory/{name}": float(value) for name, value in asdict(self).items()
               if isinstance(value, bool | int | float) and value is not None}
        return {k: round(v, 3) for k, v in out.items()}

    def describe(self) -> str:
        settings = ", ".join(f"{name}={getattr(self, name)}{' (auto)' if name in self.auto else ''}"
                             for name in PLANNED)
        if self.available_gb is None:
            return settings
        return (f"{settings}; {self.available_gb:.1f} GiB available ({self.source}), update peak estimated at "
                f"{self.estimated_peak_gb:.1f} GiB")


def _tokens(room: int, per_token: int, ceiling: int) -> int:
    tokens = (max(0, room) // max(1, per_token)) // TOKEN_STEP * TOKEN_STEP
    return max(MIN_TOKENS, min(ceiling, tokens))


def plan_memory(settings: dict[str, Any], *, device: str, shape: ModelShape | None,
                available: int | None = None, source: str = "") -> MemoryPlan:
    """Resolve the ``"auto"`` among ``settings`` (the policy's fields ``ppo_max_token_len_per_gpu``,
    ``ppo_infer_max_token_len_per_gpu``, ``gradient_checkpointing``, ``entropy_checkpointing``, ``param_dtype``,
    ``use_kl_loss``, ``critic``) for ``device``. On the CPU, ``available`` bytes (default: :func:`available_memory`)
    and the model's ``shape`` size the token budgets."""
    auto = tuple(name for name in PLANNED if settings.get(name, AUTO) == AUTO)
    value = {name: settings.get(name, AUTO) for name in PLANNED}
    cpu = device == "cpu"
    for name in ("gradient_checkpointing", "entropy_checkpointing"):
        if value[name] == AUTO:
            value[name] = cpu
    if not cpu or shape is None:  # a GPU: verl's values (the log-prob passes use the update's budget)
        if value["ppo_max_token_len_per_gpu"] == AUTO:
            value["ppo_max_token_len_per_gpu"] = GPU_TOKENS
        if value["ppo_infer_max_token_len_per_gpu"] == AUTO:
            value["ppo_infer_max_token_len_per_gpu"] = value["ppo_max_token_len_per_gpu"]
        return MemoryPlan(**value, auto=auto)
    if available is None:
        available, source = available_memory()
    available = int(available if available is not None else 8 * GIB)  # nothing to read: plan for a small laptop
    bf16 = settings.get("param_dtype") == "bf16"
    fixed = RUNTIME_BYTES + models_bytes(shape, bf16=bf16, reference=bool(settings.get("use_kl_loss")),
                                         critic=bool(settings.get("critic")))
    room = int(available * USABLE_SHARE) - fixed
    per_token = token_bytes(shape, checkpointing=bool(value["gradient_checkpointing"]), bf16=bf16)
    if value["ppo_max_token_len_per_gpu"] == AUTO:
        value["ppo_max_token_len_per_gpu"] = _tokens(room, per_token, GPU_TOKENS)
        if value["ppo_infer_max_token_len_per_gpu"] == AUTO:  # sized too, never below the update's
            value["ppo_infer_max_token_len_per_gpu"] = max(
                value["ppo_max_token_len_per_gpu"], _tokens(room, forward_token_bytes(shape, bf16=bf16),
                                                            MAX_INFER_TOKENS))
    if value["ppo_infer_max_token_len_per_gpu"] == AUTO:  # the update's budget where the user set it (verl's rule)
        value["ppo_infer_max_token_len_per_gpu"] = value["ppo_max_token_len_per_gpu"]
    peak = fixed + int(value["ppo_max_token_len_per_gpu"]) * per_token
    return MemoryPlan(**value, auto=auto, available_gb=round(available / GIB, 2), source=source,
                      estimated_peak_gb=round(peak / GIB, 2))


def resolve_memory_settings(config: Any, device: str, model_path: str | os.PathLike[str]) -> tuple[Any, MemoryPlan]:
    """``config`` (a :class:`~agentr1.trainer.policy.PolicyConfig`) with its ``"auto"`` memory settings resolved for
    ``device`` and the model at ``model_path``, and the plan that chose them."""
    settings = {name: getattr(config, name) for name in (*PLANNED, "param_dtype", "use_kl_loss", "critic")}
    needs_shape = device == "cpu" and any(settings[name] == AUTO for name in PLANNED[:2])
    plan = plan_memory(settings, device=device, shape=ModelShape.from_model(model_path) if needs_shape else None)
    if plan.estimated_peak_gb is not None and plan.available_gb is not None and \
            plan.estimated_peak_gb > plan.available_gb * USABLE_SHARE:
        log.warning("the update is estimated at %.1f GiB at its smallest budget, more than the %.1f GiB it may "
                    "plan for of the %.1f GiB available: a smaller model, param_dtype bf16 or more memory",
                    plan.estimated_peak_gb, plan.available_gb * USABLE_SHARE, plan.available_gb)
    return dataclasses.replace(config, **{name: getattr(plan, name) for name in PLANNED}), plan
