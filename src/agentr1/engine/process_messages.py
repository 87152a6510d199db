"""What the parent and the engine process (``process.py``, ``child.py``) send each other besides rows: an error as
plain fields (an exception of the generation vocabulary travels as its kind, message, status and retry delay, and is
raised again on the other side), and a weight update's tensors packed into one buffer per dtype."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from typing import Any

from agentr1.core.generation import BackendError, BackendUnavailable

__all__ = ["error_fields", "error_of", "pack", "unpack"]


def error_of(kind: str, message: str, status: int, retry_after: float | None) -> BackendError:
    if kind == "unavailable":
        return BackendUnavailable(message, retry_after=retry_after or 1.0)
    return BackendError(message, status_code=status, retry_after=retry_after)


def error_fields(exc: BaseException) -> tuple[str, str, int, float | None]:
    if isinstance(exc, BackendUnavailable):
        return "unavailable", str(exc), 503, exc.retry_after
    if isinstance(exc, BackendError):
        return "backend", str(exc), exc.status_code, exc.retry_after
    return "backend", f"local engine failed: {type(exc).__name__}: {exc}", 502, None


def pack(tensors: Mapping[str, Any]) -> tuple[dict[Any, Any], list[tuple[str, Any, int, tuple[int, ...]]]]:
    """The tensors copied into one shared-memory buffer per dtype (a pickled shared tensor is a file
    descriptor, so one per dtype, however many tensors), with (name, dtype, offset, shape) of each.
    Through host memory, not CUDA IPC: that fails under ``expandable_segments`` and would alias the
    trainer's live parameters. Where /dev/shm has no room for them (a container's 64 MB default), the
    buffers go as bytes through the pipe instead."""
    import torch

    sizes: dict[Any, int] = {}
    specs = []
    for name, t in tensors.items():
        specs.append((name, t.dtype, sizes.get(t.dtype, 0), tuple(t.shape)))
        sizes[t.dtype] = sizes.get(t.dtype, 0) + t.numel()
    total = sum(n * torch.empty((), dtype=dtype).element_size() for dtype, n in sizes.items())
    shared = _shm_free() > 2 * total + (64 << 20)
    flats = {dtype: torch.empty(n, dtype=dtype) for dtype, n in sizes.items()}
    if shared:
        flats = {dtype: flat.share_memory_() for dtype, flat in flats.items()}
    with torch.no_grad():
        for (_, dtype, offset, _), t in zip(specs, tensors.values(), strict=True):
            flats[dtype][offset: offset + t.numel()].copy_(t.detach().reshape(-1))
    if not shared:
        flats = {dtype: flat.view(torch.uint8).numpy().tobytes() for dtype, flat in flats.items()}
    return flats, specs


def _shm_free() -> int:
    try:
        return shutil.disk_usage("/dev/shm").free
    except OSError:
        return 0


def unpack(packed: tuple[dict[Any, Any], list[tuple[str, Any, int, tuple[int, ...]]]]) -> dict[str, Any]:
    import torch

    flats, specs = packed
    flats = {dtype: torch.frombuffer(bytearray(flat), dtype=torch.uint8).view(dtype) if isinstance(flat, bytes)
             else flat for dtype, flat in flats.items()}
    out = {}
    for name, dtype, offset, shape in specs:
        n = 1
        for d in shape:
            n *= d
        out[name] = flats[dtype][offset: offset + n].view(shape)
    return out
