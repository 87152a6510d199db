"""Backends behind the gateway: one interface (:class:`Backend`), token ids in and out.

``LocalBackend`` (HF transformers in this process) is imported lazily: importing this package
does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import (
    Backend,
    BackendError,
    BackendUnavailable,
    ContextLengthExceeded,
    FinishReason,
    GenerateRequest,
    GenerateResult,
    SamplingParams,
    StreamDelta,
    TokenLogprob,
)

if TYPE_CHECKING:
    from .local import LocalBackend

__all__ = [
    "Backend",
    "BackendError",
    "BackendUnavailable",
    "ContextLengthExceeded",
    "FinishReason",
    "GenerateRequest",
    "GenerateResult",
    "LocalBackend",
    "SamplingParams",
    "StreamDelta",
    "TokenLogprob",
]


def __getattr__(name: str) -> Any:
    if name == "LocalBackend":
        from .local import LocalBackend

        return LocalBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
