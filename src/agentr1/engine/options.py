"""How the embedded engine runs: :class:`EngineOptions`, one object from the settings to the engine.

``agentr1 gateway``'s flags (``GatewaySettings.engine_options()``), the trainer's rollout settings and the benches
make one; the gateway's ``LocalBackend`` hands it to the :class:`~.engine.Engine` unchanged, and an engine in a
process of its own gets the same object and builds its engine from it there.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineOptions"]


@dataclass(frozen=True)
class EngineOptions:
    """The engine's options; every default is the engine's own choice for the device it runs on."""

    device: str = "auto"  # cpu, cuda, cuda:N, or auto (a GPU if there is one)
    dtype: str = "auto"  # of the weights and the KV cache: auto (bfloat16 on a GPU, float32 on the CPU), float32, ...
    max_batch_size: int = 32  # rows decoded together
    max_context: int | None = None  # prompt + completion tokens (None: the model's max_position_embeddings)
    max_queue: int = 4096  # requests waiting for the batch at most (more are refused: BackendUnavailable)
    num_threads: int | None = None  # the worker's torch threads (None: the fastest count up to the free cores)
    prefix_cache: bool = True  # reuse the cached prefixes of earlier prompts
    cache_bytes: int | None = None  # the KV cache's bound (None: a quarter of the free GPU memory, 1 GiB on the CPU)
    exact: bool | None = None  # bit-exact prefix reuse: one chunk per row and prefill forward (None: on the CPU)
    cuda_graphs: bool = True  # replay decode steps from CUDA graphs on a GPU
    compile: bool = False  # run the decode step through torch.compile
    prefill_budget: int | None = None  # prompt tokens per prefill forward (None: 16,384 on a GPU, 1,024 on the CPU)
    flat_forward: bool = True  # on the CPU, run Llama/Qwen2 decode steps and text prefills as flat functions (flat_forward.py)
    packed_weights: bool = True  # on the CPU, multiply by weights packed once for oneDNN (packed_linear.py)
    overlap: bool | None = None  # queue each decode step before reading the previous one's tokens (None: on a GPU)
    # on the CPU, a row's bits whatever rows share its steps: decode steps of two rows at least and a lone prefill
    # row's output layer beside a copy (oneDNN multiplies one row in another order than two or more: batch.py);
    # ~12% more CPU a token for the steps that decode one row. agentr1 eval's reproducible greedy pass turns it on
    batch_invariant: bool = False
