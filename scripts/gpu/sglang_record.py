"""Record a real SGLang server's answers to the requests the gateway's ``sglang`` backend sends, as fixtures to
replay against tests/backends/fake_sglang.py in CI (format: tests/backends/fixtures/vllm/README.md, the same
for both servers).

    PYTHONPATH=$SGLANG_SITE:... python3 scripts/gpu/sglang_record.py --url http://127.0.0.1:30000 --model DIR \
        --out DIR [--note TEXT]

The ``/generate`` bodies are built by ``SGLangBackend.payload`` itself (greedy, top logprobs, sampled with a
seed, a stop token id, a stop string, until EOS, streamed and not), so they are byte for byte what the backend
sends; then bodies the backend never sends but a bug or a configuration could (errors: context overflow, an
unknown sampling key, out-of-range values, an empty or missing prompt, an out-of-vocabulary id, malformed JSON,
a text prompt), an abort (``/abort_request`` while a stream runs; ``/pause_generation`` with a request
running), ``/flush_cache``, and the weight sync: ``/update_weights_from_disk`` (the served checkpoint, then one
that does not exist: the failed load), ``/update_weights_from_tensor`` (the served model's own tensors from
GPU memory, serialized by SGLang's ``MultiprocessingSerializer`` as verl does, then a tensor of a name the model
lacks) and a generation after each, whose ``meta_info.weight_version`` says what the server took. One JSON file
per exchange; a stream's body is kept as the exact text of its events; a tensor update's body is kept as its
keys with ``serialized_named_tensors`` replaced by a note (CUDA IPC handles mean nothing elsewhere).

``/update_weights_from_tensor`` needs SGLang importable by this process (its serializer), torch with CUDA and
the model directory's safetensors: scripts/gpu/sglang_run.sh runs it on the H200 with SGLang's site first on the path.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_record import exchange, recorder_arguments, write_fixtures  # noqa: E402  (one recording format for both servers)

PROMPT = "<|im_start|>user\nWhat is 12*7?<|im_end|>\n<|im_start|>assistant\n"


def tensor_update(client: httpx.Client, model_dir: str, *, version: str, bad_name: bool = False) -> dict[str, Any]:
    """``/update_weights_from_tensor`` with the model's own weights (or one tensor under a name the model lacks),
    moved to the GPU and serialized as SGLang's verl integration does; the recorded body names what was sent."""
    import torch
    from safetensors.torch import load_file
    from sglang.srt.utils import MultiprocessingSerializer

    files = sorted(Path(model_dir).glob("*.safetensors"))
    named = [(k, v.to("cuda")) for f in files for k, v in load_file(str(f)).items()]
    if bad_name:
        named = [("model.layers.0.no_such_weight", torch.zeros(4, device="cuda", dtype=torch.bfloat16))]
    blob = MultiprocessingSerializer.serialize(named, output_str=True)
    body = {"serialized_named_tensors": [blob], "flush_cache": True, "weight_version": version}
    case = exchange(client, "POST", "/update_weights_from_tensor", body=body)
    case["request"]["body"] = {**body, "serialized_named_tensors": [
        f"<MultiprocessingSerializer of {len(named)} CUDA tensors, {len(blob)} characters>"]}
    return case


def abort_while_streaming(client: httpx.Client, url: str, stream_body: dict[str, Any], control: tuple[str, dict]
                          ) -> tuple[dict[str, Any], dict[str, Any]]:
    """A long stream, and ``control`` (path, body) sent once its first event arrived: both exchanges."""
    result: dict[str, Any] = {}
    first_event = threading.Event()

    def stream() -> None:
        started = time.perf_counter()
        with httpx.Client(base_url=url, timeout=120) as own, own.stream("POST", "/generate", json=stream_body) as r:
            text = ""
            for chunk in r.iter_text():
                text += chunk
                first_event.set()
            result["case"] = {"request": {"method": "POST", "path": "/generate", "body": stream_body},
                              "response": {"status": r.status_code, "content_type": r.headers.get("content-type"),
                                           "seconds": round(time.perf_counter() - started, 4), "events_raw": text}}
        first_event.set()

    worker = threading.Thread(target=stream)
    worker.start()
    first_event.wait(60)
    path, body = control
    answer = exchange(client, "POST", path, body=body)
    worker.join(120)
    return result.get("case", {"request": {"path": "/generate", "body": stream_body},
                               "response": {"transport_error": "the stream did not end"}}), answer


def main() -> None:
    parser = recorder_arguments(__doc__)
    parser.add_argument("--skip-tensor-update", action="store_true", help="without SGLang's serializer or CUDA here")
    args = parser.parse_args()
    for part in ("core", "gateway"):
        sys.path.insert(0, str(ROOT / part))
    from transformers import AutoTokenizer

    from agentr1.core.generation import GenerateRequest, SamplingParams
    from agentr1.gateway.backends.sglang import SGLangBackend

    prompt = AutoTokenizer.from_pretrained(args.model).encode(PROMPT, add_special_tokens=False)
    client = httpx.Client(base_url=args.url, timeout=300, limits=httpx.Limits(max_keepalive_connections=0))
    card = client.get("/v1/models").json()["data"][0]
    model, max_len = card["id"], int(card["max_model_len"])
    backend = SGLangBackend(args.url, model_name=model, max_context=max_len)
    serial = itertools.count()

    def body(stream: bool = False, **sampling: Any) -> dict[str, Any]:
        sampling.setdefault("max_new_tokens", 16)
        sampling.setdefault("temperature", 0.0)
        return backend.payload(GenerateRequest(prompt_ids=list(prompt), sampling=SamplingParams(**sampling),
                                               request_id=f"record-{next(serial)}"), stream=stream)

    def sp(**changes: Any) -> dict[str, Any]:  # the backend's body with sampling_params changed
        b = body()
        b["sampling_params"].update(changes)
        return b

    cases: dict[str, dict[str, Any]] = {}

    def record(name: str, method: str, path: str, **kw: Any) -> dict[str, Any]:
        cases[name] = exchange(client, method, path, **kw)
        return cases[name]

    record("models", "GET", "/v1/models")
    record("health", "GET", "/health")
    record("model_info", "GET", "/model_info")
    record("get_model_info", "GET", "/get_model_info")
    record("get_weight_version", "GET", "/get_weight_version")
    greedy = record("generate_greedy", "POST", "/generate", body=body(max_new_tokens=24))
    ids = greedy["response"]["body"]["output_ids"]
    text = greedy["response"]["body"].get("text") or ""
    stop_id = ids[min(3, len(ids) - 1)]
    stop_word = next((w for w in text.split()[1:] if w.strip()), "4")
    gen = "/generate"
    for name, kw in [
        ("generate_top_logprobs", {"body": body(max_new_tokens=6, top_logprobs=3)}),
        ("generate_sampled_seed", {"body": body(max_new_tokens=12, temperature=1.0, top_p=0.9, top_k=50, seed=7)}),
        ("generate_stop_token", {"body": body(stop_token_ids=[stop_id])}),
        ("generate_stop_string", {"body": body(stop=[stop_word])}),
        ("generate_until_eos", {"body": body(max_new_tokens=128)}),
        ("generate_text_prompt", {"body": {"text": "Once upon a time", "sampling_params": {"max_new_tokens": 5,
                                           "temperature": 0.0}, "return_logprob": True}}),
        ("stream_greedy", {"body": body(stream=True, max_new_tokens=8)}),
        ("stream_top_logprobs", {"body": body(stream=True, max_new_tokens=5, top_logprobs=2)}),
        ("stream_stop_token", {"body": body(stream=True, stop_token_ids=[stop_id])}),
        ("stream_until_eos", {"body": body(stream=True, max_new_tokens=128)}),
        ("error_context_overflow", {"body": body(max_new_tokens=max_len)}),
        ("error_stream_context_overflow", {"body": body(stream=True, max_new_tokens=max_len)}),
        ("error_unknown_sampling_key", {"body": sp(not_a_param=1)}),
        ("error_stream_unknown_sampling_key", {"body": {**sp(not_a_param=1), "stream": True}}),
        ("error_negative_temperature", {"body": sp(temperature=-1.0)}),
        ("error_top_p_above_one", {"body": sp(top_p=2.0)}),
        ("error_negative_max_new_tokens", {"body": sp(max_new_tokens=-1)}),
        ("error_empty_input_ids", {"body": {**body(), "input_ids": []}}),
        ("error_missing_prompt", {"body": {"sampling_params": {"max_new_tokens": 4}}}),
        ("error_input_ids_not_ints", {"body": {**body(), "input_ids": [1, "x", 3]}}),
        ("error_malformed_json", {"raw": '{"input_ids": [1, 2'}),
    ]:
        record(name, "POST", gen, **kw)

    long_stream = body(stream=True, max_new_tokens=2000, temperature=1.0)
    long_stream["sampling_params"]["ignore_eos"] = True
    cases["stream_aborted"], cases["abort_request"] = abort_while_streaming(
        client, args.url, long_stream, ("/abort_request", {"rid": long_stream["rid"]}))
    record("flush_cache", "POST", "/flush_cache")
    paused_stream = {**long_stream, "rid": f"record-{next(serial)}"}
    cases["stream_paused_abort"], cases["pause_generation_abort"] = abort_while_streaming(
        client, args.url, paused_stream, ("/pause_generation", {"mode": "abort"}))
    record("continue_generation", "POST", "/continue_generation", body={})
    record("pause_generation_retract", "POST", "/pause_generation", body={"mode": "retract"})
    record("continue_generation_after_retract", "POST", "/continue_generation", body={})

    record("update_weights_from_disk", "POST", "/update_weights_from_disk",
           body={"model_path": args.model, "weight_version": "1"})
    record("generate_after_disk_update", "POST", gen, body=body(max_new_tokens=4))
    if not args.skip_tensor_update:
        cases["update_weights_from_tensor"] = tensor_update(client, args.model, version="2")
        record("generate_after_tensor_update", "POST", gen, body=body(max_new_tokens=4))
        cases["error_update_weights_from_tensor_unknown_name"] = tensor_update(client, args.model, version="3",
                                                                              bad_name=True)
    record("error_update_weights_from_disk_missing", "POST", "/update_weights_from_disk",
           body={"model_path": "/nonexistent/agentr1-checkpoint", "weight_version": "4"})
    record("generate_after_failed_update", "POST", gen, body=body(max_new_tokens=4))
    record("model_info_after_updates", "GET", "/model_info")
    # last: 0.5.17 never calls TokenizerManager._validate_input_ids_in_vocab, so an id past the vocabulary reaches
    # the embedding on the GPU (a device-side assert could end the server)
    record("error_out_of_vocabulary", "POST", gen, body={**body(), "input_ids": [1, 10**7]})
    record("health_after_out_of_vocabulary", "GET", "/health")

    write_fixtures(cases, args.out, f"recorded from a real SGLang server: {args.note}".strip(),
                   {"model": model, "max_model_len": max_len})

if __name__ == "__main__":
    main()
