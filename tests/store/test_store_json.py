"""The JSON columns are written by orjson (store/jsonio.py): values read back as json would have read them,
including what orjson cannot write itself (NaN and infinities, lone surrogates, integers beyond 64 bits)."""

from __future__ import annotations

import json
import math

from store_workers import make_step

from agentr1.store import TraceStore
from agentr1.store.jsonio import dumps, has_non_finite, loads

ODD_VALUES = [
    {"content": "é ✓ 文字", "n": 1, "x": 1.5, "none": None, "ok": True, "nested": [{"a": [1, 2, {"b": None}]}]},
    {"surrogate": "\ud800 alone"},  # orjson refuses it; json escapes it
    {"big": 2**70, "neg": -(2**65)},  # beyond orjson's 64 bits
    {1: "int key", "2": "str key"},  # json turns keys into strings: so does orjson with OPT_NON_STR_KEYS
]


def test_values_read_back_as_json_reads_them():
    for value in ODD_VALUES:
        assert loads(dumps(value)) == json.loads(json.dumps(value)), value


def test_non_finite_floats_are_kept_as_json_writes_them():
    value = {"logprobs": [-0.5, float("-inf")], "score": float("nan"), "fine": None}
    assert has_non_finite(value) and not has_non_finite({"fine": None, "x": [1.0]})
    back = loads(dumps(value))
    assert back["logprobs"] == [-0.5, float("-inf")] and math.isnan(back["score"]) and back["fine"] is None


def test_step_json_columns_round_trip(store: TraceStore) -> None:
    sid = store.create_session()
    messages = [{"role": "user", "content": "é ✓ 文字"}, {"role": "assistant", "content": "4", "x": 2**70}]
    action = {"content": "4", "tool_calls": None, "message": {"role": "assistant", "content": "4"}}
    store.append_steps([make_step(sid, 0, messages_sent=messages, messages_seen=messages, action=action)])
    step = store.get_session(sid).steps[0]
    assert step.messages_sent == messages and step.messages_seen == messages and step.action == action
