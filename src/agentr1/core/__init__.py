"""The shared kernel below the gateway and the trainer: model resolution, rendering, and the one
registry helper and callable loader (:class:`Registry`, :func:`load_callable`).

``agentr1.core`` knows nothing of HTTP, SQL or training. The gateway renders prompts and parses
sampled ids with it; the trainer, the SFT code and the CLI resolve models and rebuild assistant
turns with the same code, so both sides agree token for token. Rendering is the public
subpackage :mod:`agentr1.core.rendering`; the generation vocabulary that the embedded engine and the gateway's
backends share (``GenerateRequest``, ``SamplingParams``, ``GenerateResult``, ...) is the public module
:mod:`agentr1.core.generation`. :func:`freeze_heap` / :func:`frozen_heap` keep Python's full garbage
collections off the serving path (the engine process, agent workers, a rollout); :func:`gil_switch_interval`
shortens the GIL hand-offs for a stretch of serving (a rollout in the trainer's process); :func:`keep_freed_memory`
keeps glibc from handing freed memory back to the kernel (the CLI applies it to every command), :func:`preload_jemalloc`
re-executes a model command on the system's jemalloc and :func:`release_freed_memory` gives its freed pages back between
phases; :func:`release_openmp_threads` / :class:`OpenMPReleasingExecutor` end a thread's OpenMP workers after its work.
"""

from agentr1.core.allocator import (
    KEEP_FREED_BYTES,
    MALLOC_SETTINGS,
    keep_freed_memory,
    malloc_in_use,
    preload_jemalloc,
    process_memory,
    release_freed_memory,
)
from agentr1.core.heap import freeze_heap, frozen_heap
from agentr1.core.lazy import lazy_exports
from agentr1.core.model_cache import models_cache_dir
from agentr1.core.model_packages import PACKAGED_MODELS, ModelFetchError, packaged_model
from agentr1.core.models import (
    SMOLLM2_DIRNAME,
    build_tiny_random_model,
    ensure_smollm2,
    ensure_tiny_model,
    resolve_model,
)
from agentr1.core.openmp import OpenMPReleasingExecutor, release_openmp_threads
from agentr1.core.qwen_models import ensure_packaged_model, ensure_tiny_qwen
from agentr1.core.registry import Registry, UnknownName, load_callable
from agentr1.core.switching import gil_switch_interval
from agentr1.core.vision_models import build_tiny_random_vlm, ensure_tiny_vlm, is_vlm_dir, load_vlm_processor

__all__ = [
    "KEEP_FREED_BYTES",
    "MALLOC_SETTINGS",
    "PACKAGED_MODELS",
    "SMOLLM2_DIRNAME",
    "ModelFetchError",
    "OpenMPReleasingExecutor",
    "Registry",
    "UnknownName",
    "build_tiny_random_model",
    "build_tiny_random_vlm",
    "ensure_packaged_model",
    "ensure_smollm2",
    "ensure_tiny_model",
    "ensure_tiny_qwen",
    "ensure_tiny_vlm",
    "freeze_heap",
    "frozen_heap",
    "gil_switch_interval",
    "is_vlm_dir",
    "keep_freed_memory",
    "lazy_exports",
    "load_callable",
    "load_vlm_processor",
    "malloc_in_use",
    "models_cache_dir",
    "packaged_model",
    "preload_jemalloc",
    "process_memory",
    "release_freed_memory",
    "release_openmp_threads",
    "resolve_model",
]
