"""Hostile and malformed requests against a real gateway (uvicorn, SQLite, SmolLM2's real tokenizer and renderer
behind an instant backend): bounded before anything recurses, a 400 in each API's own error shape, a 500 from a
bug that keeps the client's connection usable, refused calls that leave no session behind, and the real APIs'
own validation of tool calls and tool results (issue 40)."""

from __future__ import annotations

import json

import httpx
import orjson
import pytest
from gateway_harness import serve

from agentr1.core.generation import BackendUnavailable
from agentr1.core.rendering import load_renderer
from agentr1.gateway.backends.instant import InstantBackend
from agentr1.gateway.limits import _ORJSON_MAX_DEPTH, MAX_JSON_DEPTH, MAX_SCHEMA_DEPTH, check_json_value

OPENAI_KEYS = {"message", "type", "param", "code"}
USER = [{"role": "user", "content": "hi"}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}


@pytest.fixture(scope="module")
def renderer(smollm2_path):
    return load_renderer(smollm2_path)


def _reply(prompt_ids: list[int], renderer) -> str:
    text = renderer.tokenizer.decode(prompt_ids)
    if "BUG" in text:
        raise RuntimeError("a bug in the backend")  # not a BackendError: nothing handles it but the last resort
    return "I would rather not." if text.endswith("<tool_call>\n") else "The answer is 84."


@pytest.fixture(scope="module")
def gateway(renderer, tmp_path_factory):
    backend = InstantBackend(renderer.tokenizer, lambda ids: _reply(ids, renderer), model_name="policy",
                             max_context=2048)
    with serve(tmp_path_factory.mktemp("hostile") / "h.db", backend=backend, renderer=renderer,
               accept_any_model=True) as (url, store):
        yield url, store, backend


def _post(url: str, path: str, body: object, **headers: str) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(url + path, content=raw, headers={"content-type": "application/json", **headers}, timeout=30)


def _assert_shape(r: httpx.Response, path: str, status: int = 400) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    if path.endswith(("/messages", "/count_tokens")):
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, r.text
        return body["error"]
    assert set(body) == {"error"} and set(body["error"]) == OPENAI_KEYS, r.text
    return body["error"]


def _nested(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def _deep_schema(json_levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(json_levels // 2):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


BODIES = {  # a valid request of each API, with a placeholder where the deep value goes
    "/v1/chat/completions": {"model": "p", "messages": USER, "metadata": "DEEP"},
    "/v1/completions": {"model": "p", "prompt": "hi", "user": "DEEP"},
    "/v1/responses": {"model": "p", "input": "hi", "metadata": "DEEP"},
    "/v1/messages": {"model": "p", "max_tokens": 4, "messages": USER, "metadata": "DEEP"},
    "/v1/messages/count_tokens": {"model": "p", "messages": USER, "metadata": "DEEP"},
    "/sessions": {"metadata": "DEEP"},
    "/sessions/hostile-named/v1/chat/completions": {"model": "p", "messages": USER, "x": "DEEP"},
}


@pytest.mark.parametrize("levels", [300, 5000], ids=["past-the-bound", "past-the-parser"])
@pytest.mark.parametrize("path", list(BODIES))
def test_deeply_nested_bodies_are_a_400_in_each_apis_shape(gateway, path, levels):
    url, store, _ = gateway
    raw = json.dumps(BODIES[path]).replace('"DEEP"', _nested(levels).decode()).encode()
    error = _assert_shape(_post(url, path, raw), path)
    assert str(MAX_JSON_DEPTH) in error["message"], error
    with httpx.Client(base_url=url) as client:  # and the gateway still answers on a fresh request
        assert client.get("/health").status_code == 200
    assert not [s for s in store.list_sessions(limit=1000) if s.id == "hostile-named"]


def test_the_depth_bound_is_exact():
    """check_json_value leans on orjson refusing data nested deeper than 254 levels: if orjson moves its limit,
    this fails before the bound does."""
    for levels in (1, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH):
        check_json_value(json.loads(_nested(levels)))
    with pytest.raises(ValueError, match=str(MAX_JSON_DEPTH)):
        check_json_value(json.loads(_nested(MAX_JSON_DEPTH + 1)))
    orjson.dumps(json.loads(_nested(_ORJSON_MAX_DEPTH)))
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(json.loads(_nested(_ORJSON_MAX_DEPTH + 1)))
    with pytest.raises(ValueError, match="Unicode"):  # the walk still finds what the fast path refused for
        check_json_value({"a": [{"b": "\ud800"}]})
    check_json_value({"big": 2**70})  # orjson refuses integers over 64 bits: the walk takes it, and it is fine


def _with_tool(path: str, schema: dict) -> dict:
    if path == "/v1/chat/completions":
        return {"model": "p", "messages": USER,
                "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}]}
    if path == "/v1/responses":
        return {"model": "p", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": schema}]}
    return {"model": "p", "max_tokens": 4, "messages": USER, "tools": [{"name": "f", "input_schema": schema}]}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages",
                                  "/v1/messages/count_tokens"])
def test_tool_schemas_nested_too_deeply_are_a_400(gateway, path):
    url, _, _ = gateway
    deep = _deep_schema(MAX_SCHEMA_DEPTH + 16)  # inside the body's bound, past the schema's: was a 500 at ~100
    body = _with_tool(path, deep)
    if path.endswith("count_tokens"):
        body.pop("max_tokens")
    error = _assert_shape(_post(url, path, body), path)
    assert f"more than {MAX_SCHEMA_DEPTH} levels" in error["message"], error
    fine = _with_tool(path, _deep_schema(MAX_SCHEMA_DEPTH - 8))
    if path.endswith("count_tokens"):
        fine.pop("max_tokens")
    assert _post(url, path, fine).status_code == 200


def test_a_response_format_schema_nested_too_deeply_is_a_400(gateway):
    url, _, _ = gateway
    body = {"model": "p", "messages": USER, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": _deep_schema(MAX_SCHEMA_DEPTH + 16)}}}
    error = _assert_shape(_post(url, "/v1/chat/completions", body), "/v1/chat/completions")
    assert "levels" in error["message"] and error["param"] == "response_format", error


def test_an_oversized_body_is_a_413_in_each_apis_shape(renderer, tmp_path):
    backend = InstantBackend(renderer.tokenizer, "ok", model_name="policy")
    with serve(tmp_path / "big.db", backend=backend, renderer=renderer, accept_any_model=True,
               max_body_bytes=4096) as (url, _):
        big = {"model": "p", "max_tokens": 4, "messages": [{"role": "user", "content": "x" * 10_000}]}
        for path in ("/v1/messages", "/v1/chat/completions"):
            error = _assert_shape(_post(url, path, big), path, 413)
            assert "4096" in error["message"]
            chunks = (json.dumps(big).encode()[i:i + 1000] for i in range(0, 11_000, 1000))  # no Content-Length
            r = httpx.post(url + path, content=chunks, headers={"content-type": "application/json"}, timeout=30)
            _assert_shape(r, path, 413)
        assert _assert_shape(_post(url, "/v1/messages", big), "/v1/messages", 413)["type"] == "request_too_large"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_bug_is_a_500_in_the_apis_shape_and_the_connection_stays_usable(gateway, path):
    url, _, _ = gateway
    body = {"model": "p", "max_tokens": 8, "messages": [{"role": "user", "content": "BUG"}]}
    with httpx.Client(base_url=url, timeout=30, limits=httpx.Limits(max_connections=1)) as client:
        for _ in range(3):  # the connection used to be closed after the 500: the next request got a reset
            error = _assert_shape(client.post(path, json=body), path, 500)
            assert "RuntimeError" in error["message"]
            ok = client.post(path, json={**body, "messages": USER})
            assert ok.status_code == 200, ok.text


MALFORMED_CALLS = [
    [{"x": 1}],
    [{"id": "c", "type": "function"}],
    [{"id": "c", "type": "function", "function": {"arguments": "{}"}}],
    [{"id": "c", "type": "function", "function": {"name": 7, "arguments": "{}"}}],
    [{"id": "c", "type": "retrieval", "function": {"name": "f", "arguments": "{}"}}],
    ["not an object"],
]


@pytest.mark.parametrize("calls", MALFORMED_CALLS)
def test_malformed_tool_calls_in_the_history_are_a_400_with_or_without_a_session(gateway, calls):
    url, store, _ = gateway
    before = len(store.list_sessions(limit=10_000))
    messages = [*USER, {"role": "assistant", "tool_calls": calls}, {"role": "user", "content": "go on"}]
    for path in ("/v1/chat/completions", "/sessions/malformed-calls/v1/chat/completions"):
        error = _assert_shape(_post(url, path, {"model": "p", "messages": messages}), path)  # was a 500 unnamed
        assert error["param"].startswith("messages.1"), error
    assert len(store.list_sessions(limit=10_000)) == before


STRICT = [  # (path, body, words of the message): what OpenAI and Anthropic refuse
    ("/v1/chat/completions", {"model": "p", "messages": [
        *USER, {"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "content": "4"}]}, "tool_call_id"),
    ("/v1/chat/completions", {"model": "p", "messages": [
        *USER, {"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "tool_call_id": "call_9", "content": "4"}]},
     "call_9"),
    ("/v1/chat/completions", {"model": "p", "messages": [*USER, {"role": "tool", "tool_call_id": "call_1",
                                                                 "content": "4"}]}, "call_1"),
    ("/v1/chat/completions", {"model": "p", "messages": [
        *USER, {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "calculator", "arguments": {}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "4"}]}, "arguments must be a string"),
    ("/v1/chat/completions", {"model": "p", "messages": [
        *USER, {"role": "assistant", "tool_calls": [{"type": "function", "function": CALL["function"]}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "4"}]}, ".id is required"),
    ("/v1/messages", {"model": "p", "max_tokens": 4, "messages": [
        *USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_2", "content": "4"}]}]}, "tu_2"),
    ("/v1/messages", {"model": "p", "max_tokens": 4, "messages": [
        *USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_1", "name": "f", "input": "{}"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "4"}]}]},
     "valid dictionary"),
    ("/v1/responses", {"model": "p", "input": [
        {"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "c1", "name": "f", "arguments": {}},
        {"type": "function_call_output", "call_id": "c1", "output": "4"}]}, "must be a string"),
    ("/v1/responses", {"model": "p", "input": [
        {"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "4"}]}, "c2"),
]


@pytest.mark.parametrize(("path", "body", "words"), STRICT)
def test_what_the_real_apis_refuse_is_a_400(gateway, path, body, words):
    url, store, _ = gateway
    before = len(store.list_sessions(limit=10_000))
    error = _assert_shape(_post(url, path, body), path)
    assert words in error["message"], error
    assert len(store.list_sessions(limit=10_000)) == before


def test_lenient_tool_history_accepts_what_the_real_apis_refuse(renderer, tmp_path):
    backend = InstantBackend(renderer.tokenizer, "ok", model_name="policy")
    with serve(tmp_path / "lenient.db", backend=backend, renderer=renderer, accept_any_model=True,
               lenient_tool_history=True) as (url, store):
        for path, body, _ in STRICT:
            r = _post(url, path, body)
            assert r.status_code == 200, (path, r.text)
        assert len(store.list_sessions(limit=100)) == len(STRICT)
        error = _assert_shape(_post(url, "/v1/chat/completions", {"model": "p", "messages": [
            *USER, {"role": "assistant", "tool_calls": MALFORMED_CALLS[0]}]}), "/v1/chat/completions")
        assert error["param"] == "messages.1"  # what cannot be rendered at all stays refused


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
REFUSED_AFTER_ATTRIBUTION = [
    ("/v1/chat/completions", {"model": "p", "messages": [{"role": "user", "content": [IMAGE]}]}),
    ("/v1/chat/completions", {"model": "p", "messages": [{"role": "user", "content": [{"type": "weird"}]}]}),
    ("/v1/chat/completions", {"model": "p", "messages": [{"role": "user", "content": "hello " * 3000}]}),
    ("/v1/chat/completions", {"model": "p", "stream": True, "messages": [{"role": "user", "content": "hi " * 3000}]}),
    ("/v1/chat/completions", {"model": "p", "max_tokens": 4000, "messages": USER}),
    ("/v1/completions", {"model": "p", "prompt": "hi " * 3000}),
    ("/v1/responses", {"model": "p", "input": [{"role": "user", "content": [{"type": "input_image",
                                                                             "image_url": IMAGE["image_url"]["url"]}]}]}),
    ("/v1/messages", {"model": "p", "max_tokens": 4, "messages": [{"role": "user", "content": "hey " * 3000}]}),
]


@pytest.mark.parametrize(("path", "body"), REFUSED_AFTER_ATTRIBUTION)
@pytest.mark.parametrize("where", ["auto", "named"])
def test_a_call_refused_after_attribution_leaves_no_session(gateway, path, body, where):
    url, store, _ = gateway
    if where == "named":
        path = "/sessions/refused-first-call" + path
    before = {s.id for s in store.list_sessions(limit=10_000)}
    r = _post(url, path, body)
    assert r.status_code == 400, r.text
    assert "x-agentr1-session" not in r.headers  # it names no session: there is none
    assert {s.id for s in store.list_sessions(limit=10_000)} == before


def test_a_refused_call_leaves_a_session_the_user_created_and_names_it(gateway):
    url, store, _ = gateway
    session = httpx.post(f"{url}/sessions", json={}).json()["id"]
    r = _post(url, f"/sessions/{session}/v1/chat/completions", REFUSED_AFTER_ATTRIBUTION[2][1])
    assert r.status_code == 400 and r.headers["x-agentr1-session"] == session
    assert store.get_session(session).status == "running" and store.get_session(session).steps == []


def test_a_failing_backend_leaves_no_session_and_a_later_call_on_the_name_works(gateway):
    url, store, backend = gateway
    before = {s.id for s in store.list_sessions(limit=10_000)}
    backend.fail_with = BackendUnavailable("the engine is restarting", retry_after=1.0)
    try:
        for path in ("/v1/chat/completions", "/sessions/flaky/v1/chat/completions"):
            assert _post(url, path, {"model": "p", "messages": USER}).status_code == 503
    finally:
        backend.fail_with = None
    assert {s.id for s in store.list_sessions(limit=10_000)} == before
    r = _post(url, "/sessions/flaky/v1/chat/completions", {"model": "p", "messages": USER})
    assert r.status_code == 200 and r.headers["x-agentr1-session"] == "flaky"
    assert len(store.get_session("flaky").steps) == 1


def test_an_unsatisfied_tool_choice_names_its_session_and_steps(gateway):
    url, store, _ = gateway
    tool = {"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}
    r = _post(url, "/v1/chat/completions", {"model": "p", "messages": USER, "tools": [tool],
                                            "tool_choice": "required"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "tool_choice_not_satisfied", r.text
    session = r.headers["x-agentr1-session"]  # the step is stored: the answer says where
    assert r.headers["x-agentr1-steps"] == "0" and len(store.get_session(session).steps) == 1


def test_a_malformed_previous_response_id_is_a_400_and_an_unknown_one_a_404(gateway):
    url, _, _ = gateway
    error = _assert_shape(_post(url, "/v1/responses", {"model": "p", "input": "hi",
                                                       "previous_response_id": "garbage!"}), "/v1/responses")
    assert error["param"] == "previous_response_id" and "resp" in error["message"]
    _assert_shape(_post(url, "/v1/responses", {"model": "p", "input": "hi", "previous_response_id": "resp_00"}),
                  "/v1/responses", 404)
    assert httpx.get(f"{url}/v1/responses/garbage").status_code == 400


def _chat(**fields) -> dict:
    return {"model": "p", "messages": USER, **fields}


def _tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def _anthropic(**fields) -> dict:
    return {"model": "p", "max_tokens": 4, "messages": USER, **fields}


BIAS_301 = {str(i): 1 for i in range(301)}
BIASES_REFUSED = [BIAS_301, {"1000000": 5}, {"5": 100.5}, {"5": -101}, {"hello": 1}, {"-3": 1}, {"5": "x"},
                  {"5": True}]
REFUSED_AS_THE_REAL_APIS_DO = [  # (path, body, param): what OpenAI and Anthropic answer with a 400 (issue 59)
    *[("/v1/chat/completions", _chat(logit_bias=b), "logit_bias") for b in BIASES_REFUSED],
    *[("/v1/completions", {"model": "p", "prompt": "hi", "logit_bias": b}, "logit_bias") for b in BIASES_REFUSED[:3]],
    ("/v1/chat/completions", _chat(stop="x" * 20_000), "stop"),
    ("/v1/chat/completions", _chat(stop=["a", "b", "c", "d", "e"]), "stop"),
    ("/v1/completions", {"model": "p", "prompt": "hi", "stop": ["y" * 1001]}, "stop"),
    ("/v1/completions", {"model": "p", "prompt": "hi", "stop": list("abcde")}, "stop"),
    ("/v1/messages", _anthropic(stop_sequences=["z" * 20_000]), None),
    ("/v1/chat/completions", _chat(tools=[_tool("get the weather " * 20)]), "tools[0].name"),
    ("/v1/chat/completions", _chat(tools=[_tool("f" * 65)]), "tools[0].name"),
    ("/v1/chat/completions", _chat(tools=[_tool("calc"), _tool("a.b")]), "tools[1].name"),
    ("/v1/responses", {"model": "p", "input": "hi", "tools": [{"type": "function", "name": "get weather",
                                                                "parameters": {"type": "object"}}]}, "tools[0].name"),
    ("/v1/messages", _anthropic(tools=[{"name": "naïve", "input_schema": {"type": "object"}}]), None),
    ("/v1/messages/count_tokens", {"model": "p", "messages": USER,
                                   "tools": [{"name": "", "input_schema": {"type": "object"}}]}, None),
    ("/v1/chat/completions", _chat(stream=True, stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
    ("/v1/chat/completions", _chat(stream=True, stream_options={"include_usage": 1}), "stream_options.include_usage"),
    ("/v1/completions", {"model": "p", "prompt": "hi", "stream": True, "stream_options": {"include_usage": "true"}},
     "stream_options.include_usage"),
    ("/v1/messages", _anthropic(max_tokens=2000, thinking={"type": "enabled", "budget_tokens": -5}), None),
    ("/v1/messages", _anthropic(max_tokens=2000, thinking={"type": "enabled", "budget_tokens": 1023}), None),
    ("/v1/messages", _anthropic(max_tokens=2000, thinking={"type": "enabled"}), None),
    ("/v1/messages", _anthropic(max_tokens=2000, thinking={"type": "enabled", "budget_tokens": "2048"}), None),
]


@pytest.mark.parametrize(("path", "body", "param"), REFUSED_AS_THE_REAL_APIS_DO)
def test_what_the_real_apis_refuse_in_sampling_and_tools_is_a_400(gateway, path, body, param):
    url, store, _ = gateway
    before = len(store.list_sessions(limit=10_000))
    error = _assert_shape(_post(url, path, body), path)
    if param is not None:
        assert error["param"] == param, error
    assert len(store.list_sessions(limit=10_000)) == before


ACCEPTED_AT_THE_LIMITS = [  # the same fields at the edge of what the real APIs accept
    ("/v1/chat/completions", _chat(max_tokens=4, logit_bias={str(i): (-100 if i % 2 else 100) for i in range(300)})),
    ("/v1/completions", {"model": "p", "prompt": "hi", "max_tokens": 4, "logit_bias": {"49151": -0.5}}),
    ("/v1/chat/completions", _chat(max_tokens=4, stop=["x" * 1000, "a", "b", "c"])),
    ("/v1/chat/completions", _chat(max_tokens=4, tools=[_tool("A-z_0-9" + "f" * 57)])),
    ("/v1/chat/completions", _chat(max_tokens=4, stream=True, stream_options={"include_usage": True})),
    ("/v1/messages", _anthropic(max_tokens=2000, thinking={"type": "enabled", "budget_tokens": 1024})),
    ("/v1/messages", _anthropic(thinking={"type": "disabled"}, stop_sequences=["x" * 1000] * 5)),
]


@pytest.mark.parametrize(("path", "body"), ACCEPTED_AT_THE_LIMITS)
def test_the_same_fields_at_the_real_apis_limits_are_accepted(gateway, path, body):
    url, _, _ = gateway
    r = _post(url, path, body)
    assert r.status_code == 200, r.text
