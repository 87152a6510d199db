"""Backends behind the gateway: one interface (:class:`Backend`), token ids in and out, and the abilities each
declares beside it (:func:`check_backend`: a flag that promises an operation, its small protocol implemented).

``LocalBackend`` (the embedded engine, :mod:`agentr1.engine`), ``SGLangBackend``, ``VLLMBackend`` and
``LiteLLMBackend`` (docs/backends.md) are imported lazily: importing this package does not import
torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentr1.core import lazy_exports

from .base import (
    Backend,
    BackendAbilities,
    CacheRelease,
    ChatGeneration,
    ChatResult,
    EngineStatsReport,
    WeightsFromTensors,
    check_backend,
    engine_counters,
)
from .factory import build_backend, local_backend

if TYPE_CHECKING:
    from .launcher import LaunchError, LaunchSpec, SGLangLauncher, launch_servers, parse_command
    from .litellm_backend import LiteLLMBackend
    from .local import LocalBackend
    from .scripted import ScriptedBackend
    from .sglang import SGLangBackend
    from .vllm import VLLMBackend

_LAZY = {"LocalBackend": ".local", "SGLangBackend": ".sglang", "VLLMBackend": ".vllm",
         "LiteLLMBackend": ".litellm_backend", "ScriptedBackend": ".scripted", "LaunchError": ".launcher",
         "LaunchSpec": ".launcher", "SGLangLauncher": ".launcher", "launch_servers": ".launcher",
         "parse_command": ".launcher"}
__all__ = [
    "Backend",
    "BackendAbilities",
    "CacheRelease",
    "ChatGeneration",
    "ChatResult",
    "EngineStatsReport",
    "LaunchError",
    "LaunchSpec",
    "LiteLLMBackend",
    "LocalBackend",
    "SGLangBackend",
    "SGLangLauncher",
    "ScriptedBackend",
    "VLLMBackend",
    "WeightsFromTensors",
    "build_backend",
    "check_backend",
    "engine_counters",
    "launch_servers",
    "local_backend",
    "parse_command",
]
__getattr__ = lazy_exports(__name__, _LAZY)
