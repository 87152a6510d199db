"""Weights handed to a server on the same machine without a file: the body of SGLang's
``/update_weights_from_tensor``.

SGLang reads ``serialized_named_tensors``: one payload per tensor-parallel rank, each a list of
``(name, tensor)`` pairs pickled by ``torch.multiprocessing``'s ``ForkingPickler`` and base64-encoded
(SGLang's ``MultiprocessingSerializer``; sgl-project/sglang ``srt/utils/common.py``). The pickle of a
CUDA tensor holds a CUDA IPC handle to its memory, not its values: the server maps the trainer's
memory and copies from it into its own parameters (``model.load_weights``), so the tensors must stay
alive until the server has answered. A CPU tensor is copied into named shared memory (torch's
``file_system`` sharing strategy, so that a process that is not this one's child can open it: file
descriptors would need this process's multiprocessing authkey). SGLang unpickles with an allow-list (``SafeUnpickler``: builtins and ``torch.*``), which
these payloads keep to; its patched ``rebuild_cuda_tensor`` takes the plain device index torch writes.

Weights go in buckets of at most ``bucket_bytes`` so that a large model never needs a second
full copy (a bucket's tensors are converted to the served dtype, if asked, one bucket at a time).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable, Iterator, Mapping
from multiprocessing.reduction import ForkingPickler
from typing import Any

__all__ = ["DEFAULT_BUCKET_BYTES", "load_named_tensors", "serialize_named_tensors", "tensor_buckets"]

DEFAULT_BUCKET_BYTES = 512 << 20


def serialize_named_tensors(named: list[tuple[str, Any]]) -> str:
    """``named`` as one SGLang ``serialized_named_tensors`` entry (base64 of a ForkingPickler pickle).
    Importing torch.multiprocessing registers torch's reductions (CUDA IPC handles, shared memory)."""
    import torch.multiprocessing as mp  # registers the tensor reductions with ForkingPickler

    buffer = io.BytesIO()
    strategy = mp.get_sharing_strategy()
    mp.set_sharing_strategy("file_system")  # read when a CPU storage is pickled: a shared-memory name, not a descriptor
    try:
        ForkingPickler(buffer).dump(named)
    finally:
        mp.set_sharing_strategy(strategy)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def load_named_tensors(payload: str | bytes) -> list[tuple[str, Any]]:
    """The pairs of one payload, as the receiving server rebuilds them (the fake server and tests)."""
    import pickle

    import torch.multiprocessing  # noqa: F401

    raw = base64.b64decode(payload, validate=True) if isinstance(payload, str) else bytes(payload)
    pairs = pickle.loads(raw)
    if not isinstance(pairs, list) or not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
        raise ValueError("a serialized_named_tensors entry must be a list of (name, tensor) pairs")
    return pairs


def tensor_buckets(tensors: Mapping[str, Any] | Iterable[tuple[str, Any]], *, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                   dtype: Any = None) -> Iterator[list[tuple[str, Any]]]:
    """``tensors`` (a mapping or ``(name, tensor)`` pairs) in lists of at most ``bucket_bytes`` (a larger
    tensor goes alone), each tensor detached and contiguous, converted to ``dtype`` when given. CPU tensors are
    copied: pickling moves a CPU storage into shared memory, which must not happen to live parameters."""
    pairs = tensors.items() if isinstance(tensors, Mapping) else tensors
    bucket: list[tuple[str, Any]] = []
    size = 0
    for name, tensor in pairs:
        t = tensor.detach()
        if dtype is not None and t.is_floating_point() and t.dtype != dtype:
            t = t.to(dtype)
        t = t.contiguous()
        if t.device.type == "cpu" and t.data_ptr() == tensor.data_ptr():
            t = t.clone()
        nbytes = t.numel() * t.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, t))
        size += nbytes
    if bucket:
        yield bucket
