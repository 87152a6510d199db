"""A fake SGLang server: SGLang 0.5.x's HTTP protocol, answered by the real local engine
(:class:`agentr1.gateway.backends.local.LocalBackend` on a tiny random model), so the token ids,
logprobs and finish reasons it returns are real and a client that works with it speaks SGLang.

It follows the recordings of 2026-12-07 (a real SGLang 0.5.17 on one H100, SmolLM2-135M-Instruct bf16:
tests/backends/fixtures/sglang/recorded/, replayed against this fake by test_sglang_fixture_replay.py); where
they say nothing, SGLang's source (sgl-project/sglang python/sglang/srt/entrypoints/http_server.py,
managers/io_struct.py, managers/tokenizer_manager.py, sampling/sampling_params.py,
managers/schedule_batch.py; DESIGN.md section 4). What the recordings changed, the fake having been
written from the source alone:

- meta_info ends with ``cached_tokens_details`` ({"device": n, "host": 0}, null when nothing was cached)
  and ``dp_rank`` (null) after ``cached_tokens``, in whole answers and in every stream event;
- ``cached_tokens`` counts the prompt's tokens found in the prefix cache (fake_sglang_answers.PrefixCache), no longer 0;
- ``/model_info`` and ``/get_model_info`` end with ``embedding`` (:data:`EMBEDDING_INFO`);
- a request aborted while it runs (``/abort_request``, ``/pause_generation`` abort) ends with
  FINISH_ABORT and the tokens it has, in the full meta_info, no longer as one aborted in the waiting queue;
- ``/update_weights_from_tensor`` skips a name the model lacks and answers success (was 400), loads a
  partial update (the tensors not sent keep their weights), and its message names the weight version
  ("Success Weight version updated to 3.");
- an input id past the vocabulary kills the real server (:class:`OutOfVocabulary`).

What it implements:

- ``POST|PUT /generate``: GenerateReqInput {text | input_ids, sampling_params, rid, return_logprob,
  logprob_start_len, top_logprobs_num, stream}; other top-level fields are ignored (a dataclass
  body). ``sampling_params`` become ``SamplingParams(**sampling_params)``, a msgspec Struct in
  0.5.17: an unknown key raises TypeError ("Unexpected keyword argument '<key>'"), which
  http_server.generate_request does not catch (it catches ValueError): a plain 500 "Internal
  Server Error", and in a stream (whose 200 is sent) a connection that breaks off without
  ``[DONE]`` (recorded). Defaults max_new_tokens=128, temperature=1.0, top_p=1.0, top_k=-1 (whole
  vocabulary), skip_special_tokens=True; temperature below 1e-6 decodes greedily; verify()'s
  limits and the context checks -> 400 ``{"error": {"message"}}`` (_create_error_response); stop
  strings are refused under ``skip_tokenizer_init``. Answer {text, output_ids, meta_info{id,
  finish_reason, prompt_tokens, weight_version, num_retractions, input_token_logprobs,
  output_token_logprobs [[logprob, id, null]], output_token_logprobs_length, (input_top_logprobs,
  output_top_logprobs), reasoning_tokens, completion_tokens, cached_tokens, cached_tokens_details,
  dp_rank, e2e_latency (once finished), response_sent_to_client_ts (the first answer sent)}} in that
  order; no ``text`` under skip_tokenizer_init. Streaming: ``data: {...}`` events (text cumulative;
  output_ids and logprob lists cumulative, or incremental with ``stream_output=True`` as
  ``--stream-output``), errors in-band as ``data: {"error": {"message", "type":
  "invalid_request_error", "code": 400, "retryable": false}}``, then ``data: [DONE]``.
- Finish reasons (schedule_batch.py ``to_json``): {"type": "stop", "matched": id | string},
  {"type": "length", "length"}, {"type": "abort", "message": "Aborted", "status_code": null,
  "err_type": null} (FINISH_ABORT: a running request aborted, with its tokens so far; the fake's engine
  streams them, except for a request with top or prompt log-probabilities, which it generates whole). A
  request aborted before its first token answers as _handle_abort_req builds it: finish_reason {"type":
  "abort", "message": "Abort in waiting queue"}, meta_info {id, finish_reason, weight_version,
  e2e_latency, (logprob lists), completion_tokens} and ``text`` "" even without a tokenizer (from the
  source: not recorded).
- ``/health``, ``/health_generate``, ``/get_model_info`` (deprecated) and ``/model_info``
  {model_path, tokenizer_path, is_generation, preferred_sampling_params, weight_version,
  has_image_understanding, has_audio_understanding, model_type, architectures, embedding},
  ``/get_weight_version`` and ``/weight_version`` (404 in the ErrorResponse shape: deprecated),
  ``/v1/models`` (ModelCard: id, object, created, owned_by, root, parent, max_model_len),
  ``/flush_cache`` (empties the prefix cache), ``/abort_request``, ``/update_weights_from_disk``
  {model_path, weight_version} -> {success, message, num_paused_requests} (400 with success false and
  "Failed to get weights iterator: <error>." when the checkpoint cannot be read: the old weights and
  the prefix cache stay), ``/pause_generation`` {mode: abort | retract | in_place} (new requests wait;
  abort ends the running ones with finish_reason abort), ``/continue_generation``,
  ``/update_weights_from_tensor`` {serialized_named_tensors: [one payload per rank], flush_cache,
  weight_version, ...} -> {success, message}: the payload is unpickled as SGLang does (base64 of
  torch's ForkingPickler: shared memory for CPU tensors here, CUDA IPC handles on a GPU). SGLang copies
  each request's tensors into the model at once; the local engine loads only whole state dicts, so the
  fake gathers a multi-request update's tensors and loads them, completed with the engine's current
  weights, with the request that flushes the cache (the last bucket of
  :meth:`SGLangBackend.update_weights_from_tensors`). A tensor of the wrong shape: 400 with success
  false (the fake's answer; a real server's was not recorded).

Limits of the fake, not of SGLang: min_p, penalties, n, grammars, ignore_eos and logit_bias only
at their neutral values (400 otherwise); stop_regex is refused; an input id past the vocabulary is a
500 and the fake lives on. For tests: ``state.fail_next`` (statuses the next /generate calls answer
with), ``state.unhealthy``, ``state.requests`` (bodies received) and ``state.calls`` (control
endpoints called, in order).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fake_sglang_answers import FakeSGLangState, answers
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from tokenizers import Tokenizer

from agentr1.core.generation import GenerateRequest, SamplingParams
from agentr1.gateway.backends.tensor_ipc import load_named_tensors

SAMPLING_KEYS = {
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "json_schema", "regex",
    "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
    "custom_params", "stream_interval", "logit_bias", "sampling_seed",
}
NEUTRAL = {"min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
           "min_new_tokens": 0, "n": 1, "json_schema": None, "regex": None, "ebnf": None, "structural_tag": None,
           "ignore_eos": False, "logit_bias": None, "stop_regex": None}
TOP_K_ALL = 1 << 30
# /model_info's ``embedding``: what SGLang 0.5.17 answered for a generation model (SmolLM2, recorded); its ``bcg``
# (batched CUDA graphs of prefill) names the server's capture sizes, 4 ... 8,192 tokens
PREFILL_GRAPH_SIZES = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
                       *range(1280, 4097, 256), *range(4608, 8193, 512)]
EMBEDDING_INFO = {
    "family": "none", "task": "none", "execution": "none", "attention": "none", "pooling": "model_defined",
    "normalize": False, "postprocessor": "none", "tokenizer_special_tokens": "model_default",
    "supports_dimensions": False, "supports_token_embeddings": False, "supports_multimodal": False,
    "requires_embedding_flag": False, "auto_enable_embedding": False, "bcg_eligibility": "disabled",
    "safe_disable_kv_cache": False, "safe_disable_radix_cache": False, "safe_disable_chunked_prefill": False,
    "enabled": False, "matryoshka_dimensions": [],
    "bcg": {"prefill_backend": "breakable", "enabled": True, "capture_token_budget": 8192,
            "capture_batch_sizes": PREFILL_GRAPH_SIZES},
    "cache": {"kv_cache_disabled": False, "radix_cache_disabled": False, "chunked_prefill_disabled": False},
}

log = logging.getLogger("fake_sglang")


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": {"message": message}}, status_code=status)


def _invalid_body(message: str) -> JSONResponse:
    """FastAPI's RequestValidationError (bad JSON, input_ids that are not integers) as SGLang's handler answers
    it: 400 in the ErrorResponse shape (http_server.validation_exception_handler)."""
    return JSONResponse({"object": "error", "message": message, "type": "Bad Request", "param": None, "code": 400},
                        status_code=400)


def _stream_error(message: str, status: int = 400) -> dict[str, Any]:
    """An error after a stream's 200, as http_server.generate_request's stream_results sends it."""
    return {"error": {"message": message, "type": "invalid_request_error", "code": status, "retryable": False}}


def _model_config(model_path: str) -> dict[str, Any]:
    try:
        return json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}


class OutOfVocabulary(Exception):
    """An input id past the vocabulary. SGLang 0.5.17 does not check it: the id reaches the embedding on the GPU,
    where a device-side assert ends the scheduler and the server with it (recorded: no answer, then connection
    refused). The fake cannot sensibly die: it answers a plain 500 (a stream breaks off after its 200) and lives on."""


def _parse(body: dict[str, Any], state: FakeSGLangState) -> tuple[GenerateRequest, dict[str, Any]]:
    """GenerateReqInput + SamplingParams(**...) + normalize() + verify(), as the tokenizer manager."""
    ids, text = body.get("input_ids"), body.get("text")
    if ids is None and text is None:
        raise ValueError("Either text, input_ids or input_embeds should be provided.")
    if ids is None:
        if state.skip_tokenizer_init:  # TokenizerManager._tokenize_one_request
            raise ValueError("The engine initialized with skip_tokenizer_init=True cannot accept text prompts. "
                             "Please provide input_ids or re-initialize the engine with skip_tokenizer_init=False.")
        ids = state.decoder.encode(text, add_special_tokens=False).ids
    elif not ids:  # GenerateReqInput normalization
        raise ValueError("input_ids cannot be empty.")
    sp = dict(body.get("sampling_params") or {})
    unknown = sorted(set(sp) - SAMPLING_KEYS)
    if unknown:
        raise TypeError(f"Unexpected keyword argument '{unknown[0]}'")  # msgspec.Struct's __init__
    for key, neutral in NEUTRAL.items():
        if sp.get(key) not in (neutral, None):
            raise ValueError(f"fake SGLang: {key}={sp[key]!r} is not supported by the local engine")
    max_new = 128 if sp.get("max_new_tokens") is None else int(sp["max_new_tokens"])
    temperature = 1.0 if sp.get("temperature") is None else float(sp["temperature"])
    top_p = 1.0 if sp.get("top_p") is None else float(sp["top_p"])
    top_k = -1 if sp.get("top_k") is None else int(sp["top_k"])
    if temperature < 0:
        raise ValueError(f"temperature must be a non-negative finite number, got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
    if top_k < 1 and top_k != -1:
        raise ValueError(f"top_k must be -1 (disable) or at least 1, got {top_k}.")
    if max_new < 0:
        raise ValueError(f"max_new_tokens must be at least 0, got {max_new}.")
    stop = sp.get("stop") or []
    stop = [stop] if isinstance(stop, str) else list(stop)
    if stop and state.skip_tokenizer_init:
        raise ValueError(f"stop={stop!r} is unavailable when skip_tokenizer_init=True (requires tokenizer to "
                         "decode tokens to text for matching).")
    if len(ids) >= state.context_len:
        raise ValueError(f"The input ({len(ids)} tokens) is longer than the model's context length "
                         f"({state.context_len} tokens).")
    if len(ids) + max_new > state.context_len:
        raise ValueError(f"Requested token count exceeds the model's maximum context length of {state.context_len} "
                         f"tokens. You requested a total of {len(ids) + max_new} tokens: {len(ids)} tokens from the "
                         f"input messages and {max_new} tokens for the completion. Please reduce the number of tokens "
                         "in the input messages or the completion to fit within the limit.")
    if max_new == 0:
        raise ValueError("fake SGLang: max_new_tokens=0 is not supported by the local engine")
    greedy = temperature < 1e-6
    params = SamplingParams(
        max_new_tokens=max_new, temperature=0.0 if greedy else temperature, top_p=top_p,
        top_k=0 if top_k in (-1, TOP_K_ALL) else top_k, stop=stop,
        stop_token_ids=[int(t) for t in sp.get("stop_token_ids") or []], seed=sp.get("sampling_seed"),
        top_logprobs=int(body.get("top_logprobs_num") or 0) if body.get("return_logprob") else 0)
    start = -1 if body.get("logprob_start_len") is None else int(body["logprob_start_len"])
    if start not in (-1, 0):
        raise ValueError(f"fake SGLang: logprob_start_len={start} is not supported (-1: output only, 0: the prompt too)")
    if any(not 0 <= t < state.vocab_size for t in ids):
        raise OutOfVocabulary(f"input id past the vocabulary of {state.vocab_size}")
    rid = str(body.get("rid") or f"{time.time_ns():x}")
    options = {"rid": rid, "return_logprob": bool(body.get("return_logprob")),
               "skip_special_tokens": sp.get("skip_special_tokens", True) is not False,
               "no_stop_trim": bool(sp.get("no_stop_trim")), "stream": bool(body.get("stream"))}
    return GenerateRequest(prompt_ids=[int(t) for t in ids], sampling=params, request_id=rid,
                           prompt_logprobs=bool(body.get("return_logprob")) and start == 0), options


def _loaded(state: FakeSGLangState, body: dict[str, Any], message: str) -> str:
    """A weight update's answer after a load that succeeded: ``message`` and, when the body set one, the new
    weight version (SGLang's words: "<message> Weight version updated to <version>.", recorded)."""
    if body.get("weight_version") is None:
        return message
    state.weight_version = str(body["weight_version"])
    return f"{message} Weight version updated to {state.weight_version}."


def _whole_state_dict(engine: Any, sent: Mapping[str, Any]) -> dict[str, Any]:
    """The tensors of a ``/update_weights_from_tensor`` as a whole state dict, which the local engine needs. SGLang
    copies each tensor it is sent into the parameter of its name and keeps the others; a name the model lacks it
    skips (logging "Parameter <name> not found in params_dict") and still answers success (recorded). So here such
    names are dropped, and the parameters not sent keep the engine's current weights (its model runs in this
    process)."""
    current = engine.engine.model.state_dict()
    for name in sorted(set(sent) - set(current)):
        log.warning("Parameter %s not found in params_dict", name)
    return {**current, **{name: tensor for name, tensor in sent.items() if name in current}}


def create_app(engine: Any, *, model_path: str | Path, served_model_name: str | None = None,
               context_len: int | None = None, stream_output: bool = False,
               skip_tokenizer_init: bool = False) -> FastAPI:
    """A fake SGLang server on ``engine`` (a started LocalBackend); its state is ``app.state.fake``."""
    state = FakeSGLangState(engine=engine, model_path=str(model_path),
                            served_model_name=served_model_name or str(model_path),
                            context_len=context_len or engine.max_context, stream_output=stream_output,
                            skip_tokenizer_init=skip_tokenizer_init,
                            decoder=Tokenizer.from_file(str(Path(model_path) / "tokenizer.json")),
                            vocab_size=engine.engine.vocab_size)
    app = FastAPI()
    app.state.fake = state

    @app.api_route("/generate", methods=["POST", "PUT"])
    async def generate(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            return _invalid_body(f"JSON decode error: {exc}")
        if not isinstance(body, dict):
            return _invalid_body("Input should be a valid dictionary or instance of GenerateReqInput")
        ids = body.get("input_ids")
        if ids and not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):  # validate_list_i64_1d
            return _invalid_body("Value error, elements must be int")
        state.requests.append(body)
        if state.fail_next:
            status = state.fail_next.pop(0)
            return Response("Internal Server Error" if status == 500 else b"", status_code=status)
        while state.paused:  # tokenizer manager: requests wait on is_pause_cond
            await asyncio.sleep(0.01)
        if body.get("stream"):
            return StreamingResponse(_events(body), media_type="text/event-stream")
        try:
            req, opts = _parse(body, state)
        except ValueError as exc:
            return _error(str(exc))
        except (TypeError, OutOfVocabulary):  # not caught by SGLang's handler: Starlette's plain 500
            return PlainTextResponse("Internal Server Error", status_code=500)
        whole = [answer async for answer in answers(state, req, opts)]
        return JSONResponse(whole[-1])

    async def _events(body: dict[str, Any]) -> Any:
        def event(payload: dict[str, Any]) -> bytes:
            return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"  # orjson: compact

        try:
            req, opts = _parse(body, state)
        except ValueError as exc:  # after the 200: the error is reported in-band
            yield event(_stream_error(str(exc)))
            yield b"data: [DONE]\n\n"
            return
        # a TypeError (an unknown sampling key) or OutOfVocabulary propagates: the ASGI server breaks the connection off
        async for answer in answers(state, req, opts):
            yield event(answer)
        yield b"data: [DONE]\n\n"

    @app.get("/health")
    @app.get("/health_generate")
    async def health() -> Response:
        return Response(status_code=503 if state.unhealthy else 200)

    @app.get("/get_model_info")
    @app.get("/model_info")
    async def model_info() -> dict[str, Any]:
        config = _model_config(state.model_path)
        return {"model_path": state.model_path, "tokenizer_path": state.model_path, "is_generation": True,
                "preferred_sampling_params": None, "weight_version": state.weight_version,
                "has_image_understanding": False, "has_audio_understanding": False,
                "model_type": config.get("model_type"), "architectures": config.get("architectures"),
                "embedding": EMBEDDING_INFO}

    @app.get("/get_weight_version")
    @app.get("/weight_version")
    async def weight_version() -> JSONResponse:  # deprecated in 0.5.17: an HTTPException(404) in ErrorResponse form
        return JSONResponse({"object": "error", "message": "Endpoint '/get_weight_version' or '/weight_version' is "
                             "deprecated. Please use '/model_info' instead.", "type": "404", "param": None,
                             "code": 404}, status_code=404)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": state.served_model_name, "object": "model",
                                            "created": int(time.time()), "owned_by": "sglang",
                                            "root": state.served_model_name, "parent": None,
                                            "max_model_len": state.context_len}]}

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache() -> Response:
        state.calls.append(("flush_cache", None))
        state.prefixes.clear()
        return Response("Cache flushed.\nPlease check backend logs for more details. (When there are running or "
                        "waiting requests, the operation will not be performed.)\n", status_code=200)

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request) -> JSONResponse:
        body = await request.json()
        state.calls.append(("update_weights_from_disk", body))
        try:
            await state.engine.update_weights(body["model_path"])
        except Exception as exc:
            return JSONResponse({"success": False, "message": f"Failed to get weights iterator: {exc}.",
                                 "num_paused_requests": 0}, status_code=400)
        state.prefixes.clear()
        return JSONResponse({"success": True, "message": _loaded(state, body, "Succeeded to update model weights."),
                             "num_paused_requests": 0})

    @app.post("/update_weights_from_tensor")
    async def update_weights_from_tensor(request: Request) -> JSONResponse:
        body = await request.json()
        state.calls.append(("update_weights_from_tensor", {k: v for k, v in body.items()
                                                           if k != "serialized_named_tensors"}))
        try:
            state.pending_tensors.update(load_named_tensors(body["serialized_named_tensors"][0]))
            if body.get("flush_cache", True):
                sent, state.pending_tensors = state.pending_tensors, {}
                await state.engine.update_weights_from_tensors(_whole_state_dict(state.engine, sent))
                state.prefixes.clear()
        except Exception as exc:  # (a real server's answer to a tensor of the wrong shape was not recorded)
            state.pending_tensors = {}
            return JSONResponse({"success": False, "message": f"{type(exc).__name__}: {exc}"}, status_code=400)
        return JSONResponse({"success": True, "message": _loaded(state, body, "Success")})

    @app.post("/pause_generation")
    async def pause_generation(request: Request) -> JSONResponse:
        raw = await request.body()
        mode = (json.loads(raw) if raw else {}).get("mode", "abort")
        state.calls.append(("pause_generation", mode))
        state.paused = True
        if mode == "abort":
            for rid, task in list(state.running.items()):
                state.aborted.add(rid)
                if task is not None:
                    task.cancel()
        return JSONResponse({"message": "Generation paused successfully.", "status": "ok"})

    @app.post("/continue_generation")
    async def continue_generation() -> JSONResponse:
        state.calls.append(("continue_generation", None))
        state.paused = False
        return JSONResponse({"message": "Generation continued successfully.", "status": "ok"})

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        body = await request.json()
        for rid, task in list(state.running.items()):
            if body.get("abort_all") or rid == body.get("rid"):
                state.aborted.add(rid)
                if task is not None:
                    task.cancel()
        return Response(status_code=200)

    return app


def main(argv: list[str] | None = None) -> None:
    """``python tests/backends/fake_sglang.py --model-path DIR --host H --port P ...``: the fake as a
    process, started the way ``python -m sglang.launch_server`` is (the launcher's tests use it as
    ``--launch-command``). Flag names are SGLang's; GPU and memory flags are accepted and ignored
    (no GPU here); an unknown flag exits with code 2, as SGLang's argparse does."""
    import argparse

    import uvicorn

    from agentr1.engine import EngineOptions
    from agentr1.gateway.backends import LocalBackend

    parser = argparse.ArgumentParser(description="fake SGLang server (SGLang's HTTP protocol, local engine)")
    parser.add_argument("--model-path", "--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--context-length", type=int, default=None)
    parser.add_argument("--skip-tokenizer-init", action="store_true")
    parser.add_argument("--stream-output", action="store_true")
    parser.add_argument("--base-gpu-id", type=int, default=0)
    parser.add_argument("--tp-size", "--tp", type=int, default=1)
    parser.add_argument("--mem-fraction-static", type=float, default=None)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    engine = LocalBackend(args.model_path, EngineOptions(device="cpu", max_batch_size=8, threads=1))
    engine.engine.start()
    app = create_app(engine, model_path=args.model_path, served_model_name=args.served_model_name,
                     context_len=args.context_length, stream_output=args.stream_output,
                     skip_tokenizer_init=args.skip_tokenizer_init)
    print(f"fake SGLang on {args.host}:{args.port} (base GPU {args.base_gpu_id})", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
