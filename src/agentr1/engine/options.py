"""How the embedded engine runs: :class:`EngineOptions`, the one declaration of the engine's knobs.

``agentr1 gateway``'s settings nest it as ``GatewaySettings.engine`` (flags ``--engine-<knob>``, environment
``AGENTR1_ENGINE__<KNOB>``), the trainer's rollout config as ``actor_rollout_ref.rollout.engine`` (YAML), and the
benches build one; the gateway's ``LocalBackend`` hands it to the :class:`~.engine.Engine` unchanged, and an engine
in a process of its own gets the same object (pickled) and builds its engine from it there.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EngineOptions"]

GIB = 2**30


class EngineOptions(BaseModel):
    """The engine's options; every default is the engine's own choice for the device it runs on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    device: str = Field("auto", description="Where the engine runs: cpu, cuda, cuda:N, or auto (a GPU if there is "
                        "one).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Of the weights and the KV cache (auto: bfloat16 on a GPU, float32 on the CPU). bfloat16 "
        "on a CPU with AVX-512 BF16 or AMX runs the matrix products 2.5-3x faster than float32 (log-probabilities then "
        "carry bfloat16's rounding, as on a GPU). docs/benchmarks.md")
    max_batch_size: int = Field(32, ge=1, description="Requests decoded together.")
    max_context: int | None = Field(None, ge=1, description="Prompt + completion tokens at most (default: the "
                                    "model's max_position_embeddings).")
    max_queue: int = Field(4096, ge=1, description="Requests waiting for the batch at most (more are refused).")
    threads: int | None = Field(None, ge=1, description="On the CPU: the engine's torch threads (default: of the "
                                "counts up to the cores other work leaves free, the fastest). What it samples does "
                                "not depend on it. docs/evaluation.md")
    prefix_cache: bool = Field(True, description="Reuse the cached prefixes of earlier prompts.")
    cache_gb: float | None = Field(None, gt=0, description="GiB for the KV cache (running rows and cached prefixes; "
                                   "default a quarter of the GPU memory free at start, 1 GiB on the CPU). Set it when "
                                   "several engines share one GPU: each default takes a quarter of what is left.")
    exact: bool | None = Field(None, description="Prefill one 16-token chunk per row and forward, so that a reused "
                               "prefix gives the same bits as a fresh prefill (default on the CPU; off: a call's new "
                               "prompt tokens in one forward, reuse exact up to float rounding, far fewer prefill "
                               "forwards). docs/benchmarks.md")
    cuda_graphs: bool = Field(True, description="On a GPU, replay decode steps from CUDA graphs.")
    compile: bool = Field(False, description="Compile the decode step with torch.compile (on an H200 1.6x the "
                          "tokens/s of plain transformers' compiled generate at 128 rows; the first steps compile for "
                          "1.5-3.5 minutes). docs/benchmarks.md")
    prefill_budget: int | None = Field(None, ge=16, description="Prompt tokens per prefill forward (default 16,384 "
                                       "on a GPU, 1,024 on the CPU).")
    flat_forward: bool = Field(True, description="On the CPU, run Llama/Qwen2 decode steps and text prefills as flat "
                               "functions (engine/flat_forward.py).")
    packed_weights: bool = Field(True, description="On the CPU, multiply by weights packed once for oneDNN "
                                 "(engine/packed_linear.py).")
    overlap: bool | None = Field(None, description="Queue each decode step before reading the previous one's tokens "
                                 "(default: on a GPU).")
    batch_invariant: bool = Field(False, description="On the CPU, a row's tokens and log-probs the same bits whatever "
                                  "rows share its steps (decode steps of two rows at least: ~12% more CPU for the "
                                  "steps of a lone row). agentr1 eval turns it on. docs/evaluation.md")

    def cache_bound(self) -> int | None:
        """:attr:`cache_gb` in bytes (None: the engine's default for its device)."""
        return None if self.cache_gb is None else int(self.cache_gb * GIB)
