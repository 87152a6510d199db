"""Hostile fuzzing of the four APIs beyond their OpenAPI schema (issue 40): valid requests of each API, rich in
tools, tool calls, tool results and content parts, with one value anywhere inside them (a message, a content
part, a tool call, a tool's schema, a sampling field) replaced by something hostile: nesting hundreds to thousands
of levels deep, numbers past every float and integer range, odd Unicode (lone surrogate escapes, NUL, bidi marks,
combining runs, long strings), or a value of the wrong type. Each answer must come within a timeout, never be a
5xx, have the API's own error shape, and a refused call must leave no session behind.

Bodies are sent as raw bytes, so they may hold what ``json.dumps`` never writes (``1e999``, ``NaN``, ``\\ud800``).
AGENTR1_FUZZ_EXAMPLES sets the examples per API (default 8: a quick pass in the default suite, ~70 requests);
the long run is ``AGENTR1_FUZZ_EXAMPLES=1000 pytest tests/gateway/test_fuzz_hostile.py`` (the same examples
every run; with ``AGENTR1_FUZZ_RANDOM=1`` new ones).
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import pytest
from gateway_harness import serve_instant
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from agentr1.store.schema import SessionRow

EXAMPLES = int(os.environ.get("AGENTR1_FUZZ_EXAMPLES", "8"))
DERANDOMIZE = not os.environ.get("AGENTR1_FUZZ_RANDOM")
CALL_TIMEOUT_S = 15.0
PLACE = "@@HOSTILE@@"
OPENAI_KEYS = {"message", "type", "param", "code"}
SCHEMA = {"type": "object", "properties": {"expression": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["expression"]}
CALL = {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "1"}'}}

BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "model": "p", "max_tokens": 8, "temperature": 0.5, "stop": ["\n\n"], "seed": 3, "logprobs": True,
        "top_logprobs": 2, "tools": [{"type": "function", "function": {"name": "calculator", "parameters": SCHEMA}}],
        "tool_choice": "auto", "response_format": {"type": "text"},
        "messages": [{"role": "system", "content": "be brief"},
                     {"role": "user", "content": [{"type": "text", "text": "what is 1?"}]},
                     {"role": "assistant", "content": None, "tool_calls": [CALL]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "1"},
                     {"role": "user", "content": "thanks"}]},
    # no echo: with logprobs it needs the prompt scored, which the instant backend does not do (400)
    "/v1/completions": {"model": "p", "prompt": ["hello", "world"], "max_tokens": 4, "logprobs": 1, "echo": False,
                        "stop": ["."], "n": 2, "stream_options": {"include_usage": True}},
    "/v1/responses": {
        "model": "p", "instructions": "be brief", "max_output_tokens": 8, "top_logprobs": 1,
        "tools": [{"type": "function", "name": "calculator", "parameters": SCHEMA}],
        "text": {"format": {"type": "text"}}, "metadata": {"k": "v"},
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "what is 1?"}]},
                  {"type": "function_call", "call_id": "c1", "name": "calculator", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": "c1", "output": "1"}]},
    "/v1/messages": {
        "model": "p", "max_tokens": 8, "system": [{"type": "text", "text": "be brief"}], "top_k": 5,
        "stop_sequences": ["\n\n"], "tools": [{"name": "calculator", "input_schema": SCHEMA}],
        "tool_choice": {"type": "auto"},
        "messages": [{"role": "user", "content": "what is 1?"},
                     {"role": "assistant", "content": [{"type": "text", "text": "let me see"},
                                                       {"type": "tool_use", "id": "tu_1", "name": "calculator",
                                                        "input": {"expression": "1"}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "1"},
                                                  {"type": "text", "text": "thanks"}]}]},
}


def _paths(value: Any, at: tuple = ()) -> list[tuple]:
    """Every place inside ``value`` a hostile value can go: each existing value, and a new key in each object."""
    found = [at] if at else []
    if isinstance(value, dict):
        found.append((*at, "__new__"))
        for key, child in value.items():
            found += _paths(child, (*at, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            found += _paths(child, (*at, i))
    return found


def _placed(body: Any, path: tuple) -> Any:
    """A copy of ``body`` with the placeholder at ``path``."""
    body = json.loads(json.dumps(body))
    node = body
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = PLACE
    return body


def _nested(depth: int, leaf: str, opener: str) -> str:
    closer = "]" if opener == "[" else "}"
    if opener == "{":
        return '{"a":' * depth + leaf + "}" * depth
    return opener * depth + leaf + closer * depth


DEEP = st.builds(_nested, st.sampled_from([100, 129, 200, 255, 600, 1100, 5000]), st.sampled_from(["1", '"x"', "[]"]),
                 st.sampled_from(["[", "{"]))
HUGE = st.sampled_from(["1e999", "-1e999", "1e-999", "NaN", "Infinity", "-Infinity", "18446744073709551616",
                        "-9223372036854775809", str(10**400), "0.0000000000000000000000000001", "-0", "1E+308",
                        "123456789012345678901234567890.5"])
ODD_TEXT = st.one_of(
    st.sampled_from(['"\\ud800"', '"a\\udfffb"', '"\\u0000"', '"\\u202e\\u2066evil"', '"\\ufeff"', '"\\uffff"',
                     '"' + "\\u0301" * 5000 + '"', '"' + "x" * 200_000 + '"', '""']),
    st.text(min_size=1, max_size=40).map(lambda s: json.dumps(s, ensure_ascii=False)),
)
WRONG_TYPE = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                       st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(),
                                                                            max_size=2)).map(json.dumps)
HOSTILE = st.one_of(DEEP, HUGE, ODD_TEXT, WRONG_TYPE)


@pytest.fixture(scope="module")
def gateway(smollm2_path, tmp_path_factory):
    with serve_instant(tmp_path_factory.mktemp("fuzz-hostile") / "f.db", smollm2_path) as served:
        yield served


def _sessions(store: Any) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(SessionRow)).scalar_one())


def _check(client: httpx.Client, store: Any, path: str, raw: bytes) -> int:
    before = _sessions(store)
    r = client.post(path, content=raw, headers={"content-type": "application/json"})
    where = f"POST {path} {raw[:300]!r} -> {r.status_code}: {r.text[:300]}"
    assert r.status_code < 500, where
    if r.status_code >= 400:
        body = r.json()
        if path.endswith("/messages"):
            assert body.get("type") == "error" and set(body["error"]) == {"type", "message"}, where
        else:
            assert set(body) == {"error"} and set(body["error"]) == OPENAI_KEYS, where
        assert isinstance(body["error"]["message"], str) and body["error"]["message"], where
        assert _sessions(store) == before, f"a refused call left a session behind: {where}"
    return r.status_code


@pytest.mark.fuzz
@pytest.mark.parametrize("api", list(BODIES))
def test_hostile_values_anywhere_in_a_request_are_refused_cleanly(gateway, api):
    url, store = gateway
    base = BODIES[api]
    statuses: list[int] = []
    with httpx.Client(base_url=url, timeout=CALL_TIMEOUT_S) as client:  # one pooled connection: it must survive
        assert client.post(api, json=base).status_code == 200  # the base request is valid

        @given(path=st.sampled_from(_paths(base)), hostile=HOSTILE, named=st.booleans(), stream=st.booleans())
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=DERANDOMIZE,
                  database=None)
        def fuzz(path: tuple, hostile: str, named: bool, stream: bool) -> None:
            body = _placed({**base, "stream": stream}, path)
            raw = json.dumps(body, ensure_ascii=False).replace(json.dumps(PLACE), hostile).encode("utf-8")
            statuses.append(_check(client, store, f"/sessions/fuzz-{api.rsplit('/', 1)[-1]}{api}" if named else api,
                                   raw))

        fuzz()
    print(f"{api}: {len(statuses)} hostile requests, answers {sorted(set(statuses))}")
    assert 400 in statuses  # the hostile values reach the checks (and some are harmless: 200 is fine)
