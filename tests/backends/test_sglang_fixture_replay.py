"""The fake SGLang server (fake_sglang.py) against a real SGLang 0.5.17's recorded answers, so the fake stays honest.

tests/backends/fixtures/sglang/recorded/ holds what scripts/gpu/sglang_record.py recorded on one H100 on 2026-12-07
(scripts/gpu/sglang_run.sh; the format is tests/backends/fixtures/vllm/README.md's; README.md there). Each request is sent to the
fake exactly as it was sent to SGLang (same bytes, the fake's model directory where the recording named the
server's), in the recorded order, and the fake's answer must have the recorded one's shape, as the vLLM replay
compares it (test_vllm_fixture_replay.shape_diff: keys in the same order, JSON types, lists element by element),
except what the model decides: ``finish_reason`` of a generation that stopped or ran out of length (which one
depends on the model: the fake runs the tiny random test model), values, and lengths. Streams: ``data:`` events,
``[DONE]`` last, the same kinds (middle, final, error) in the same order.

Three kinds of request cannot go to the fake byte for byte, so they are sent as close to the recording as the fake
allows. A tensor update's CUDA IPC handles mean nothing here: the fake gets CPU tensors in shared memory of what the
recorder sent (the model's own weights, or one tensor under a name the model lacks: scripts/gpu/sglang_record.py's
``tensor_update``). An abort while a stream runs (``PARTNERS``) is two requests at once: the stream, and its partner
(``/abort_request``, ``/pause_generation``) sent once the first event arrived, as the recorder did; both answers are
compared; the stream goes without ``ignore_eos`` (the local engine has no such switch; the abort comes after a few
tokens). Not replayed, by name (REQUIRES_SERVER): what killed the real server.
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

from agentr1.gateway.backends.tensor_ipc import serialize_named_tensors

FIXTURES = Path(__file__).parent / "fixtures" / "sglang" / "recorded"
REQUIRES_SERVER = {  # name -> why the replay cannot send it to the fake
    "error_out_of_vocabulary": "an input id past the vocabulary killed the real server (no answer): the fake "
                               "cannot sensibly die, it answers 500 and lives on",
    "health_after_out_of_vocabulary": "the real server was dead by then (connection refused)",
}
PARTNERS = {"stream_aborted": "abort_request", "stream_paused_abort": "pause_generation_abort"}  # stream -> control
UNKNOWN_TENSOR = "model.layers.0.no_such_weight"  # the name sglang_record.tensor_update sends (its server's log too)
MODEL_DECIDED = {"finish_reason"}  # stop (matched) or length: which one is the model's doing, unless an abort


def load() -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in (json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json")))}


RECORDED = load()
CASES = sorted((c for name, c in RECORDED.items() if name not in REQUIRES_SERVER and name not in PARTNERS.values()),
               key=lambda c: c["seq"])


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


def local_request(fixture: dict[str, Any], model_path: Path) -> dict[str, Any]:
    """The fixture's request as the fake can take it (module docstring): the recording machine's checkpoint (a disk
    update's model_path) replaced by the fake's model, unless it names one that does not exist (the failed load); a
    tensor update's CUDA tensors by CPU tensors of what was sent; a stream aborted beside another request without
    ``ignore_eos``."""
    request, body = fixture["request"], fixture["request"].get("body")
    if not isinstance(body, dict):
        return request
    if "serialized_named_tensors" in body:
        return {**request, "body": {**body, "serialized_named_tensors": [
            serialize_named_tensors(sent_tensors(fixture["name"], model_path))]}}
    if fixture["name"] in PARTNERS:
        sampling = {k: v for k, v in body["sampling_params"].items() if k != "ignore_eos"}
        return {**request, "body": {**body, "sampling_params": sampling}}
    if "model_path" not in body or body["model_path"].startswith("/nonexistent"):
        return request
    return {**request, "body": {**body, "model_path": str(model_path)}}


def sent_tensors(name: str, model_path: Path) -> list[tuple[str, Any]]:
    """CPU tensors of what the recorder sent in a tensor update (sglang_record.tensor_update): one under a name the
    model lacks, or the model's own weights. Kept alive for the fake to open: the payload names their shared memory."""
    import torch

    from agentr1.engine.weights import read_safetensors

    named = ([(UNKNOWN_TENSOR, torch.zeros(4, dtype=torch.bfloat16))] if name.endswith("_unknown_name")
             else list(read_safetensors(model_path).items()))
    SENT.append(named)
    return named


SENT: list[Any] = []  # the tensors of the payloads sent


def send_beside(url: str, stream: dict[str, Any], partner: dict[str, Any]) -> tuple[httpx.Response, httpx.Response]:
    """A stream, and ``partner`` sent once its first event arrived (sglang_record.abort_while_streaming): both
    answers."""
    with httpx.Client(timeout=120) as client, client.stream(
            stream["method"], url + stream["path"], content=json.dumps(stream["body"]).encode(),
            headers={"Content-Type": "application/json"}) as r:
        chunks = r.iter_text()
        text = next(chunks, "")
        control = send(url, partner)
        text += "".join(chunks)
    return httpx.Response(r.status_code, headers=r.headers, text=text), control


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
    request = local_request(fixture, tiny_model_path)
    if fixture["name"] in PARTNERS:
        partner = RECORDED[PARTNERS[fixture["name"]]]
        answer, control = send_beside(url, request, partner["request"])
        problems = compare_sglang(fixture, answer) + compare_sglang(partner, control)
    else:
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
    assert REQUIRES_SERVER and all(c["name"] not in REQUIRES_SERVER for c in CASES)
