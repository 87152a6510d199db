"""Record a real vLLM server's answers to the requests the gateway's ``vllm`` backend sends, as fixtures
for tests/backends/test_vllm_fixture_replay.py (which replays them against tests/backends/fake_vllm.py).

    python3 scripts/gpu/vllm_record.py --url http://127.0.0.1:8000 --model DIR --out DIR [--note TEXT]

The completion bodies are built by ``VLLMBackend.payload`` itself (greedy, sampled with a seed, top
logprobs, stop token, stop string, streamed and not), so they are byte for byte what the backend sends;
then bodies the backend never sends but an agent or a bug could (errors: context overflow, unknown model,
too many logprobs, a prompt that is not token ids, an empty prompt, an out-of-vocabulary id, malformed
JSON, a negative temperature, a stream that overflows), and the control endpoints of weight sync and
pause (``/collective_rpc``, ``/reset_prefix_cache``, ``/sleep``, ``/wake_up``, ``/is_sleeping``,
``/pause``, ``/resume``), ``/v1/models`` and ``/health``. One JSON file per exchange (format:
tests/backends/fixtures/vllm/README.md); a stream's body is kept as the exact text of its events.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]


def exchange(client: httpx.Client, method: str, path: str, *, body: Any = None, raw: str | None = None,
             params: dict[str, Any] | None = None) -> dict[str, Any]:
    """One request and the server's answer, as a fixture's ``request`` and ``response``."""
    request: dict[str, Any] = {"method": method, "path": path}
    if params:
        request["params"] = params
    headers = {}
    content = None
    if raw is not None:
        request["raw_body"], content = raw, raw.encode()
        headers["Content-Type"] = "application/json"
    elif body is not None:
        request["body"], content = body, json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    started = time.perf_counter()
    try:
        r = client.request(method, path, content=content, headers=headers, params=params)
    except httpx.TransportError as exc:  # the server closed the connection without an answer
        return {"request": request, "response": {"transport_error": f"{type(exc).__name__}: {exc}",
                                                 "seconds": round(time.perf_counter() - started, 4)}}
    response: dict[str, Any] = {"status": r.status_code, "content_type": r.headers.get("content-type"),
                                "seconds": round(time.perf_counter() - started, 4)}
    if "text/event-stream" in (r.headers.get("content-type") or ""):
        response["events_raw"] = r.text
    else:
        response["raw"] = r.text
        try:
            response["body"] = r.json()
        except ValueError:
            pass
    return {"request": request, "response": response}


def plan(body: Any, model: str, max_len: int, model_dir: str, greedy_ids: list[int],
         greedy_text: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(name, method, path, request) of every exchange after ``completion_greedy``, in order;
    ``body(stream=False, extra=None, **sampling)`` is the backend's own payload for a request."""
    stop_id = greedy_ids[min(3, len(greedy_ids) - 1)]
    stop_word = next((w for w in greedy_text.split()[1:] if w.strip()), "4")
    completion = "/v1/completions"
    return [
        ("completion_top_logprobs", "POST", completion, {"body": body(max_new_tokens=6, top_logprobs=3)}),
        ("completion_sampled_seed", "POST", completion,
         {"body": body(max_new_tokens=12, temperature=1.0, top_p=0.9, top_k=50, seed=7)}),
        ("completion_stop_token", "POST", completion, {"body": body(stop_token_ids=[stop_id])}),
        ("completion_stop_string", "POST", completion, {"body": body(stop=[stop_word])}),
        ("completion_until_eos", "POST", completion, {"body": body(max_new_tokens=128)}),
        ("completion_without_return_token_ids", "POST", completion,
         {"body": body(max_new_tokens=6, extra={"return_token_ids": False})}),
        ("completion_text_prompt", "POST", completion,
         {"body": {"model": model, "prompt": "Once upon a time", "max_tokens": 5, "temperature": 0.0, "logprobs": 0}}),
        ("stream_greedy", "POST", completion, {"body": body(stream=True, max_new_tokens=8)}),
        ("stream_top_logprobs", "POST", completion, {"body": body(stream=True, max_new_tokens=5, top_logprobs=2)}),
        ("stream_stop_token", "POST", completion, {"body": body(stream=True, stop_token_ids=[stop_id])}),
        ("stream_until_eos", "POST", completion, {"body": body(stream=True, max_new_tokens=128)}),
        # errors: what the backend passes on to the agent (400) or treats as its own configuration error
        ("error_context_overflow", "POST", completion, {"body": body(max_new_tokens=max_len)}),
        ("error_stream_context_overflow", "POST", completion, {"body": body(stream=True, max_new_tokens=max_len)}),
        ("error_unknown_model", "POST", completion, {"body": {**body(), "model": "not-served"}}),
        ("error_too_many_logprobs", "POST", completion, {"body": body(top_logprobs=21)}),
        ("error_prompt_not_token_ids", "POST", completion, {"body": {**body(), "prompt": [1, "x", 3]}}),
        ("error_negative_token_id", "POST", completion, {"body": {**body(), "prompt": [1, -5, 3]}}),
        ("error_out_of_vocabulary", "POST", completion, {"body": {**body(), "prompt": [1, 10**7]}}),
        ("error_empty_prompt", "POST", completion, {"body": {**body(), "prompt": []}}),
        ("error_missing_prompt", "POST", completion, {"body": {"model": model, "max_tokens": 4}}),
        ("error_negative_temperature", "POST", completion, {"body": {**body(), "temperature": -1.0}}),
        ("error_negative_max_tokens", "POST", completion, {"body": {**body(), "max_tokens": -1}}),
        ("error_malformed_json", "POST", completion, {"raw": '{"model": "x", "prompt": [1, 2'}),
        ("error_body_not_an_object", "POST", completion, {"raw": "[1, 2, 3]"}),
        # weight sync and pause, as VLLMBackend calls them (dev mode)
        ("rpc_reload_weights", "POST", "/collective_rpc",
         {"body": {"method": "reload_weights", "args": [], "kwargs": {}, "timeout": 600}}),
        ("rpc_reload_weights_path", "POST", "/collective_rpc",
         {"body": {"method": "reload_weights", "args": [], "kwargs": {"weights_path": model_dir}, "timeout": 600}}),
        ("rpc_update_config", "POST", "/collective_rpc",
         {"body": {"method": "update_config", "args": [{"model_config": {"model": model_dir}}], "kwargs": {},
                   "timeout": 600}}),
        ("rpc_unknown_method", "POST", "/collective_rpc",
         {"body": {"method": "no_such_method", "args": [], "kwargs": {}, "timeout": 60}}),
        ("reset_prefix_cache", "POST", "/reset_prefix_cache", {}),
        ("sleep", "POST", "/sleep", {"params": {"level": 1}}),
        ("is_sleeping_asleep", "GET", "/is_sleeping", {}),
        ("wake_up", "POST", "/wake_up", {}),
        ("is_sleeping_awake", "GET", "/is_sleeping", {}),
        ("pause", "POST", "/pause", {"params": {"mode": "wait"}}),
        ("is_paused", "GET", "/is_paused", {}),
        ("resume", "POST", "/resume", {}),
        ("completion_after_resume", "POST", completion, {"body": body(max_new_tokens=4)}),
    ]


def main() -> None:
    parser = recorder_arguments(__doc__)
    args = parser.parse_args()
    for part in ("core", "gateway", "tests/backends"):
        sys.path.insert(0, str(ROOT / part))
    from transformers import AutoTokenizer

    from agentr1.core.generation import GenerateRequest, SamplingParams
    from agentr1.gateway.backends.vllm import VLLMBackend

    tok = AutoTokenizer.from_pretrained(args.model)
    prompt = tok.encode("<|im_start|>user\nWhat is 12*7?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    # a connection per exchange: vLLM 0.25.0 may drop a kept-alive connection after an error it re-raised,
    # and the next exchange on it would record a reset that is not its own answer (first recordings)
    client = httpx.Client(base_url=args.url, timeout=120, limits=httpx.Limits(max_keepalive_connections=0))
    card = client.get("/v1/models").json()["data"][0]
    model, max_len = card["id"], int(card["max_model_len"])
    backend = VLLMBackend(args.url, model_name=model, max_context=max_len)

    def body(stream: bool = False, extra: dict[str, Any] | None = None, **sampling: Any) -> dict[str, Any]:
        sampling.setdefault("max_new_tokens", 16)
        sampling.setdefault("temperature", 0.0)
        request = GenerateRequest(prompt_ids=list(prompt), sampling=SamplingParams(**sampling),
                                  request_id=f"record-{next(serial)}")
        payload = backend.payload(request, stream=stream)
        payload.update(extra or {})
        return payload

    cases: dict[str, dict[str, Any]] = {}
    serial = itertools.count()

    def record(name: str, method: str, path: str, **kw: Any) -> dict[str, Any]:
        cases[name] = exchange(client, method, path, **kw)
        return cases[name]

    record("models", "GET", "/v1/models")
    record("health", "GET", "/health")
    greedy = record("completion_greedy", "POST", "/v1/completions", body=body(max_new_tokens=24))
    choice = greedy["response"]["body"]["choices"][0]
    for name, method, path, kw in plan(body, model, max_len, args.model, choice["token_ids"], choice["text"]):
        record(name, method, path, **kw)

    write_fixtures(cases, args.out, f"recorded from a real vLLM server: {args.note}".strip(),
                   {"model": model, "max_model_len": max_len})


def recorder_arguments(doc: str | None) -> argparse.ArgumentParser:
    """The flags both recorders take: the server's URL, its model directory, the output folder, a note."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True, help="the served model directory (its tokenizer encodes the prompt)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--note", default="", help="where and on what it was recorded")
    return parser


def write_fixtures(cases: dict[str, dict[str, Any]], out: Path, source: str, server: dict[str, Any]) -> None:
    """One JSON file per exchange, in recording order (``seq``), and a line per exchange on stdout."""
    out.mkdir(parents=True, exist_ok=True)
    for seq, (name, case) in enumerate(cases.items()):
        fixture = {"name": name, "seq": seq, "source": source, "server": server, **case}
        (out / f"{name}.json").write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")
        r = case["response"]
        print(f"{name:48s} {r.get('status', 'no answer')}  "
              f"{str(r.get('events_raw', r.get('raw', r.get('transport_error'))))[:150]!r}")


if __name__ == "__main__":
    main()
