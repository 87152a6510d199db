"""The backend interface: token ids in; token ids, logprobs and a finish reason out.

Every backend (local engine, SGLang, vLLM, LiteLLM) implements :class:`Backend`; the gateway
never talks to a model any other way. The requests, results and errors it speaks are the generation
vocabulary of :mod:`agentr1.core.generation` (below the gateway: the embedded engine speaks it too);
import them from there, the one place that names them.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from agentr1.core.generation import GenerateRequest, GenerateResult, StreamDelta

__all__ = ["Backend", "tokenizer_dir"]


@runtime_checkable
class Backend(Protocol):
    name: str  # "local", "sglang", ...
    model_name: str  # the id served under /v1/models
    model_path: str | None  # the model directory it was started on (its tokenizer decodes the ids); None: external
    max_context: int  # prompt + completion tokens the model accepts
    trainable: bool  # False for external models without token ids
    # (optional) True when ``GenerateRequest.multimodal`` is fed to the model; absent means False

    @property
    def policy_version(self) -> int: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def ready(self) -> bool: ...

    async def generate(self, request: GenerateRequest) -> GenerateResult: ...

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamDelta]: ...

    async def update_weights(self, path: str) -> int:
        """Load new weights from ``path``; returns the new policy version."""
        ...

    async def pause(self) -> None: ...

    async def resume(self) -> None: ...


def tokenizer_dir(tokenizer: Any) -> str | None:
    """The directory a backend's ``tokenizer`` (a local model directory, or a HF tokenizer loaded from one) names; None
    when there is none (no tokenizer, or one built in memory)."""
    if isinstance(tokenizer, str | os.PathLike):
        return str(tokenizer)
    return getattr(tokenizer, "name_or_path", None) or None
