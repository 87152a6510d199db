"""The fake SGLang server (fake_sglang.py) against a real SGLang 0.5.17's recorded answers, so the fake stays honest.

tests/backends/fixtures/sglang/recorded/ holds what scripts/gpu/sglang_record.py recorded on the H200
(scripts/gpu/sglang_run.sh; the format is tests/backends/fixtures/vllm/README.md's). Each request is sent to the
fake exactly as it was sent to SGLang (same bytes, the fake's model directory where the recording named the
server's), in the recorded order, and the fake's answer must have the recorded one's shape, as the vLLM replay
compares it (test_vllm_fixture_replay.shape_diff: keys in the same order, JSON types, lists element by element),
except what the model decides: ``finish_reason`` of a generation that stopped or ran out of length (which one
depends on the model: the fake runs the tiny random test model), values, and lengths. Streams: ``data:`` events,
``[DONE]`` last, the same kinds (middle, final, error) in the same order. Not replayed, by name (REQUIRES_SERVER):
the exchanges that need two requests at once (an abort while a stream runs) or SGLang's own CUDA tensors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fake_sglang
import httpx
import pytest
from backend_helpers import served
from test_vllm_fixture_replay import events, send, shape_diff

FIXTURES = Path(__file__).parent / "fixtures" / "sglang" / "recorded"
REQUIRES_SERVER = {  # name prefix -> why the replay cannot send it to the fake on its own
    "stream_aborted": "aborted by /abort_request while it streamed (two requests at once)",
    "abort_request": "answers for the stream above",
    "stream_paused_abort": "aborted by /pause_generation while it streamed",
    "pause_generation_abort": "answers for the stream above",
    "update_weights_from_tensor": "CUDA IPC handles of the recording machine",
    "error_update_weights_from_tensor": "CUDA IPC handles of the recording machine",
}
MODEL_DECIDED = {"finish_reason"}  # stop (matched) or length: which one is the model's doing, unless an abort


def load() -> list[dict[str, Any]]:
    cases = [json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))]
    return sorted((c for c in cases if not c["name"].startswith(tuple(REQUIRES_SERVER))), key=lambda c: c["seq"])


CASES = load()


def without_model_decisions(value: Any) -> Any:
    """``value`` with finish reasons other than aborts and errors left out of the comparison."""
    if isinstance(value, dict):
        return {k: ("<model>" if k in MODEL_DECIDED and isinstance(v, dict) and v.get("type") in ("stop", "length")
                    else without_model_decisions(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [without_model_decisions(v) for v in value]
    return value


def event_kinds(raw: str) -> list[tuple[str, Any]]:
    """(kind, event) per payload of an SGLang stream; runs of middle events collapse to one."""
    out: list[tuple[str, Any]] = []
    for payload in events(raw):
        event = None if payload == "[DONE]" else json.loads(payload)
        kind = ("[DONE]" if event is None else "error" if "error" in event else
                "final" if (event.get("meta_info") or {}).get("finish_reason") else "middle")
        if not (out and kind == "middle" and out[-1][0] == "middle"):
            out.append((kind, event))
    return out


def compare(fixture: dict[str, Any], answer: httpx.Response) -> list[str]:
    want = fixture["response"]
    if "transport_error" in want:
        return [] if answer.status_code >= 500 else [f"SGLang broke the connection off, the fake answered "
                                                     f"{answer.status_code}"]
    problems = []
    if answer.status_code != want["status"]:
        problems.append(f"status {want['status']} from SGLang, {answer.status_code} from the fake: {answer.text[:300]}")
    if (answer.headers.get("content-type") or "").split(";")[0] != (want["content_type"] or "").split(";")[0]:
        problems.append(f"content type {want['content_type']!r} from SGLang, {answer.headers.get('content-type')!r}")
    if problems:
        return problems
    if "events_raw" in want:
        expected, actual = event_kinds(want["events_raw"]), event_kinds(answer.text)
        if [k for k, _ in expected] != [k for k, _ in actual]:
            return [f"stream events {[k for k, _ in expected]} from SGLang, {[k for k, _ in actual]} from the fake"]
        return [d for (kind, e), (_, a) in zip(expected, actual, strict=True)
                for d in shape_diff(without_model_decisions(e), without_model_decisions(a), f"<{kind} event>")]
    if "body" not in want:
        return [] if answer.text == want["raw"] else [f"body {want['raw']!r} from SGLang, {answer.text[:200]!r}"]
    return shape_diff(without_model_decisions(want["body"]), without_model_decisions(answer.json()))


def local_request(request: dict[str, Any], model_path: Path) -> dict[str, Any]:
    """``request`` with the recording machine's checkpoint (a disk update's model_path) replaced by the fake's
    model, unless it names one that does not exist (the failed load)."""
    body = request.get("body")
    if not isinstance(body, dict) or "model_path" not in body or body["model_path"].startswith("/nonexistent"):
        return request
    return {**request, "body": {**body, "model_path": str(model_path)}}


@pytest.fixture(scope="module")
def fakes(engine, tiny_model_path):
    """A fake server per served model name and context length the fixtures were answered with."""
    from contextlib import ExitStack

    with ExitStack() as stack:
        servers: dict[tuple[str, int], str] = {}

        def get(server: dict[str, Any]) -> str:
            key = (server["model"], int(server["max_model_len"]))
            if key not in servers:
                app = fake_sglang.create_app(engine, model_path=tiny_model_path, served_model_name=key[0],
                                             context_len=key[1])
                servers[key] = stack.enter_context(served(app))
            return servers[key]

        yield get


def compare_sglang(fixture: dict[str, Any], answer: httpx.Response) -> list[str]:
    """:func:`compare`, its messages naming SGLang (shape_diff speaks of vLLM's answer)."""
    return [problem.replace("vLLM's answer", "SGLang's answer") for problem in compare(fixture, answer)]


@pytest.mark.parametrize("fixture", CASES, ids=[c["name"] for c in CASES])
def test_the_fake_answers_like_sglang(fixture, fakes, tiny_model_path):
    url = fakes(fixture["server"])
    request = local_request(fixture["request"], tiny_model_path)
    try:
        answer = send(url, request)
    except httpx.TransportError as exc:  # a stream the fake broke off, as SGLang does for an unknown sampling key
        answer = httpx.Response(599, text=f"{type(exc).__name__}: {exc}")
    problems = compare_sglang(fixture, answer)
    assert not problems, f"fixture {fixture['name']} ({fixture['source']}):\n" + "\n".join(problems)


def test_the_comparison_ignores_model_decisions_but_not_shapes():
    """A stop and a length finish compare equal; an abort, a missing key or a float for an int does not."""
    meta = {"id": "r", "finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": 3,
            "output_token_logprobs": [[-0.5, 7, None]]}
    answer = {"text": "a", "output_ids": [7], "meta_info": meta}
    length = {**answer, "meta_info": {**meta, "finish_reason": {"type": "length", "length": 1}}}
    assert shape_diff(without_model_decisions(answer), without_model_decisions(length)) == []
    aborted = {**answer, "meta_info": {**meta, "finish_reason": {"type": "abort", "message": "Aborted"}}}
    assert shape_diff(without_model_decisions(answer), without_model_decisions(aborted))
    assert shape_diff(answer, {"output_ids": [7], "meta_info": meta})  # text missing
    assert shape_diff(answer, {**answer, "meta_info": {**meta, "prompt_tokens": 3.0}})
    stream = 'data: {"output_ids":[1],"meta_info":{"finish_reason":null}}\n\n' \
             'data: {"output_ids":[1,2],"meta_info":{"finish_reason":{"type":"length","length":2}}}\n\ndata: [DONE]\n\n'
    assert [k for k, _ in event_kinds(stream)] == ["middle", "final", "[DONE]"]
    assert REQUIRES_SERVER and all(not c["name"].startswith(tuple(REQUIRES_SERVER)) for c in CASES)
