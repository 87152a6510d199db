"""Compact binary encoding of token ids (int32) and logprobs (float32), little-endian."""

from __future__ import annotations

import array
from collections.abc import Sequence

import numpy as np

_INT32 = np.dtype("<i4")
_FLOAT32 = np.dtype("<f4")


def encode_ids(ids: Sequence[int] | np.ndarray | None) -> bytes | None:
    if ids is None:
        return None
    if isinstance(ids, list):  # the gateway's case: a list of ints through array (C), faster than numpy from a list
        if ids and type(ids[0]) is bool and all(type(x) is bool for x in ids):  # numpy's bool array: refused
            raise ValueError("token ids must be non-negative integers that fit in int32")
        try:
            arr = np.frombuffer(array.array("q", ids), dtype=np.int64)
        except (TypeError, OverflowError):
            raise ValueError("token ids must be non-negative integers that fit in int32") from None
    else:
        arr = np.asarray(ids)
    if arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() > np.iinfo(_INT32).max):
        raise ValueError("token ids must be non-negative integers that fit in int32")
    return arr.astype(_INT32, copy=False).tobytes()


def decode_ids(blob: bytes | None) -> list[int] | None:
    if blob is None:
        return None
    return np.frombuffer(blob, dtype=_INT32).tolist()


def encode_floats(values: Sequence[float] | np.ndarray | None) -> bytes | None:
    if values is None:
        return None
    return np.asarray(values, dtype=_FLOAT32).tobytes()


def decode_floats(blob: bytes | None) -> list[float] | None:
    if blob is None:
        return None
    return np.frombuffer(blob, dtype=_FLOAT32).tolist()
