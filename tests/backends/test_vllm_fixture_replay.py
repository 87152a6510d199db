"""The fake vLLM server (fake_vllm.py) against vLLM's own answers, so the fake stays honest.

Every fixture in tests/backends/fixtures/vllm/ (README.md there) is one request the ``vllm`` backend sends
(or a bad body an agent or a bug could send) and vLLM's answer: ``recorded/`` holds a real vLLM 0.25.0's
answers (scripts/gpu/vllm_record.py on the H200), ``derived/`` answers produced from vLLM 0.25.0's own code
without a GPU (derive_from_vllm_source.py), used only for names that have no recorded fixture. Each request is
sent to the fake exactly as it was sent to vLLM (same bytes, same served model name and max_model_len), in
the recorded order, and the fake's answer must have the recorded one's shape:

- status, content type, compact JSON where vLLM's was compact;
- JSON: the same keys in the same order at every level and the same JSON types (int is not float, null is
  not a value), lists compared element by element as far as both go; ``top_logprobs`` entries as maps
  (same key form, float values); ``stop_reason`` may be null, an int or a string on either side (it says
  which stop the model hit, and the fake's model is another);
- streams: ``data: <json>`` events separated by blank lines, ``data: [DONE]`` last, the same kinds of event
  in the same order (first chunk, middle chunks, final chunk, usage chunk), each kind with the same shape;
- errors: the same ``type``, ``code`` and ``param``, and the same ``message`` where it is vLLM's own text
  (everything but request-validation errors, whose text is pydantic's and the server's file paths).

What the model decides (tokens, text, logprobs, finish reasons, lengths) is not compared: the fake's engine
runs the tiny random test model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import fake_vllm
import httpx
import pytest
from backend_helpers import served

FIXTURES = Path(__file__).parent / "fixtures" / "vllm"
DATA_DECIDED = {"stop_reason"}  # null, the stop token id or the stop string: which one depends on the model
MAPS = {"top_logprobs"}  # lists of {token: logprob} maps: their keys are data


def read(kind: str) -> dict[str, dict[str, Any]]:
    return {f["name"]: {**f, "kind": kind} for f in (json.loads(p.read_text()) for p in
                                                       sorted((FIXTURES / kind).glob("*.json")))}


def load_fixtures() -> list[dict[str, Any]]:
    """Recorded fixtures, and derived ones for the names not recorded, in the recorded order. A recorded
    exchange that got no answer (``transport_error``: it was sent on a kept-alive connection that vLLM
    0.25.0 closed after the previous exchange's error, which it answers and re-raises) has nothing to
    compare: the derived fixture of its name stands in (test_every_reset_...)."""
    chosen = read("derived")
    chosen.update({name: f for name, f in read("recorded").items() if "transport_error" not in f["response"]})
    return sorted(chosen.values(), key=lambda f: (f["kind"] != "recorded", f["seq"]))


CASES = load_fixtures()
RESETS = sorted(name for name, f in read("recorded").items() if "transport_error" in f["response"])


def test_every_reset_in_the_recording_has_a_derived_answer():
    derived = read("derived")
    assert all(name in derived and "status" in derived[name]["response"] for name in RESETS), RESETS


def local_request(request: dict[str, Any], fixture: dict[str, Any], model_path: Path) -> dict[str, Any]:
    """``request`` with the recording machine's model directory (a reload's ``weights_path``) replaced by
    the fake's model."""
    kwargs = (request.get("body") or {}).get("kwargs") or {}
    if "weights_path" not in kwargs:
        return request
    body = {**request["body"], "kwargs": {**kwargs, "weights_path": str(model_path)}}
    return {**request, "body": body}


def kind_of(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", type(None): "null", list: "list",
            dict: "object"}[type(value)]


def shape_diff(expected: Any, actual: Any, path: str = "$") -> list[str]:
    """Where ``actual`` does not have ``expected``'s shape (module docstring); [] if it does."""
    key = path.rsplit(".", 1)[-1].split("[", 1)[0]
    if key in DATA_DECIDED and {kind_of(expected), kind_of(actual)} <= {"null", "int", "str"}:
        return []
    if kind_of(expected) != kind_of(actual):
        return [f"{path}: {kind_of(expected)} in vLLM's answer, {kind_of(actual)} in the fake's"]
    if isinstance(expected, dict):
        if key in MAPS or path.endswith("].top_logprobs[]"):
            return map_diff(expected, actual, path)
        if list(expected) != list(actual):
            return [f"{path}: keys {list(expected)} in vLLM's answer, {list(actual)} in the fake's"]
        return [d for k in expected for d in shape_diff(expected[k], actual[k], f"{path}.{k}")]
    if isinstance(expected, list):
        if key in MAPS:
            return [d for e, a in zip(expected, actual, strict=False) for d in map_diff(e, a, f"{path}[]")]
        if bool(expected) != bool(actual) and path.endswith(".choices"):
            return [f"{path}: {len(expected)} choices in vLLM's answer, {len(actual)} in the fake's"]
        return [d for e, a in zip(expected, actual, strict=False) for d in shape_diff(e, a, f"{path}[]")]
    return []


def map_diff(expected: Any, actual: Any, path: str) -> list[str]:
    if kind_of(expected) != kind_of(actual) or expected is None:
        return [] if expected == actual else [f"{path}: {kind_of(expected)} vs {kind_of(actual)}"]
    if expected and actual and token_id_form(expected) != token_id_form(actual):
        return [f"{path}: keys like {list(expected)[:2]} in vLLM's answer, {list(actual)[:2]} in the fake's"]
    kinds = {kind_of(v) for v in list(expected.values()) + list(actual.values())}
    return [] if kinds <= {"float"} else [f"{path}: values {kinds}"]


def token_id_form(keys: Any) -> set[bool]:
    return {bool(re.fullmatch(r"token_id:\d+", k)) for k in keys}


def events(raw: str) -> list[str]:
    """The payloads of an SSE body, checking vLLM's framing: ``data: <payload>`` blocks ending in a blank line."""
    assert raw.endswith("\n\n"), f"the stream does not end with a blank line: {raw[-40:]!r}"
    blocks = raw[:-2].split("\n\n")
    assert all(b.startswith("data: ") and "\n" not in b for b in blocks), f"not data: lines: {blocks[:3]}"
    return [b[len("data: "):] for b in blocks]


def event_kinds(payloads: list[str]) -> list[tuple[str, Any]]:
    """(kind, parsed event) per payload; runs of middle chunks collapse to one."""
    out: list[tuple[str, Any]] = []
    for i, payload in enumerate(payloads):
        if payload == "[DONE]":
            out.append(("[DONE]", None))
            continue
        event = json.loads(payload)
        if "error" in event:
            kind = "error"
        elif not event.get("choices"):
            kind = "usage"
        else:
            first = i == 0
            final = event["choices"][0].get("finish_reason") is not None
            kind = "first+final" if first and final else "first" if first else "final" if final else "middle"
        if not (out and kind == "middle" and out[-1][0] == "middle"):
            out.append((kind, event))
    return out


def compact(text: str, body: Any) -> bool:
    return text == json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def compare(fixture: dict[str, Any], answer: httpx.Response) -> list[str]:
    want = fixture["response"]
    problems = []
    if answer.status_code != want["status"]:
        problems.append(f"status {want['status']} from vLLM, {answer.status_code} from the fake: {answer.text[:300]}")
    if answer.headers.get("content-type") != want["content_type"]:
        problems.append(f"content type {want['content_type']!r} from vLLM, {answer.headers.get('content-type')!r}")
    if problems:
        return problems
    if "events_raw" in want:
        expected, actual = event_kinds(events(want["events_raw"])), event_kinds(events(answer.text))
        if [k for k, _ in expected] != [k for k, _ in actual]:
            return [f"stream events {[k for k, _ in expected]} from vLLM, {[k for k, _ in actual]} from the fake"]
        for (kind, e), (_, a) in zip(expected, actual, strict=True):
            problems += shape_diff(e, a, f"<{kind} event>")
        return problems
    if "body" not in want:
        return [] if answer.text == want["raw"] else [f"body {want['raw']!r} from vLLM, {answer.text[:200]!r}"]
    body = answer.json()
    if compact(want["raw"], want["body"]) and not compact(answer.text, body):
        problems.append("vLLM's JSON is compact, the fake's is not")
    problems += shape_diff(want["body"], body)
    error, got = want["body"].get("error"), body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(got, dict):
        for field in ("type", "code", "param") + (("message",) if error["type"] != "Bad Request" else ()):
            if error[field] != got.get(field):
                problems.append(f"error {field}: {error[field]!r} from vLLM, {got.get(field)!r} from the fake")
    return problems


@pytest.fixture(scope="module")
def fakes(engine, tiny_model_path):
    """A fake server per served model name and max_model_len the fixtures were answered with."""
    from contextlib import ExitStack

    with ExitStack() as stack:
        servers: dict[tuple[str, int], tuple[str, Any]] = {}

        def get(server: dict[str, Any]) -> tuple[str, Any]:
            key = (server["model"], int(server["max_model_len"]))
            if key not in servers:
                app = fake_vllm.create_app(engine, model_path=tiny_model_path, served_model_name=key[0],
                                           max_model_len=key[1])
                servers[key] = (stack.enter_context(served(app)), app.state.fake)
            return servers[key]

        yield get


def send(url: str, request: dict[str, Any]) -> httpx.Response:
    """A fixture's request, sent as it was recorded (the same bytes, parameters and method)."""
    content = request["raw_body"].encode() if "raw_body" in request else (
        json.dumps(request["body"]).encode() if "body" in request else None)
    headers = {"Content-Type": "application/json"} if content is not None else {}
    return httpx.request(request["method"], url + request["path"], content=content, headers=headers,
                         params=request.get("params"), timeout=120)


@pytest.mark.parametrize("fixture", CASES, ids=[f"{f['kind']}:{f['name']}" for f in CASES])
def test_the_fake_answers_like_vllm(fixture, fakes, tiny_model_path):
    url, fake = fakes(fixture["server"])
    request = local_request(fixture["request"], fixture, tiny_model_path)
    try:
        answer = send(url, request)
    finally:
        fake.worker_model_path = str(tiny_model_path)  # update_config names the recording machine's path
    problems = compare(fixture, answer)
    assert not problems, f"{fixture['kind']} fixture {fixture['name']} ({fixture['source']}):\n" + "\n".join(problems)


def test_every_request_of_the_backend_has_a_fixture():
    """The completions (whole and streamed, logprobs, stop ids) and every control call VLLMBackend makes."""
    seen = {(f["request"]["path"], (f["request"].get("body") or {}).get("stream"),
             (f["request"].get("body") or {}).get("method")) for f in CASES}
    for needed in [("/v1/completions", False, None), ("/v1/completions", True, None), ("/v1/models", None, None),
                   ("/health", None, None), ("/collective_rpc", None, "update_config"),
                   ("/collective_rpc", None, "reload_weights"), ("/reset_prefix_cache", None, None),
                   ("/sleep", None, None), ("/wake_up", None, None), ("/pause", None, None), ("/resume", None, None)]:
        assert needed in seen, f"no fixture for {needed}"


def test_the_comparison_catches_what_it_should():
    """The shape check fails on a missing key, a reordered key, an int for a float, a null for a list."""
    answer = {"id": "x", "choices": [{"text": "a", "logprobs": {"token_logprobs": [-0.5]}, "stop_reason": None}]}
    assert shape_diff(answer, answer) == []
    assert shape_diff(answer, {"choices": answer["choices"], "id": "x"})  # order
    assert shape_diff(answer, {"id": "x"})  # missing
    assert shape_diff(answer, {"id": "x", "choices": [{"text": "a", "logprobs": {"token_logprobs": [0]},
                                                       "stop_reason": None}]})  # int for float
    assert shape_diff(answer, {"id": "x", "choices": [{"text": "a", "logprobs": None, "stop_reason": 2}]})
    assert not shape_diff(answer, {"id": "x", "choices": [{"text": "b", "logprobs": {"token_logprobs": [-1.0, -2.0]},
                                                           "stop_reason": 7}]})  # values and stop_reason are data
    with pytest.raises(AssertionError):
        events('data: {"a":1}\n\ndata: [DONE]\n')  # no blank line at the end
    with pytest.raises(AssertionError):
        events('{"a":1}\n\ndata: [DONE]\n\n')  # not a data: line
