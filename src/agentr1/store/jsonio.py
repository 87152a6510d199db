"""The JSON of the store's JSON columns (messages, tools, sampling, actions), written and read by orjson.

``json.dumps`` of a step's messages was the largest cost of a step write that grows with the conversation
(two copies of the history per step: ``messages_sent`` and ``messages_seen``); orjson writes the same values
in a fraction of the CPU. What orjson refuses or would change goes through ``json`` as before: non-finite
floats (orjson writes ``null`` for them; ``json`` writes ``NaN``/``Infinity``, which reads back), strings with
lone surrogates, integers beyond 64 bits. The text differs from ``json.dumps``' (compact, non-ASCII kept);
the values read back are the same."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

__all__ = ["dumps", "has_non_finite", "loads"]


def has_non_finite(value: Any) -> bool:
    """Whether a NaN or an infinity hides anywhere in ``value`` (dicts, lists, tuples)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return True
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)
    return False


def dumps(value: Any) -> str:
    try:
        data = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # orjson.JSONEncodeError: lone surrogates, big integers, types json may know
        return json.dumps(value)
    if b"null" in data and has_non_finite(value):  # a null may have been a NaN or an infinity (rare, cheap)
        return json.dumps(value)
    return data.decode()


def loads(text: str | bytes) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # NaN / Infinity as json writes them
        return json.loads(text)
