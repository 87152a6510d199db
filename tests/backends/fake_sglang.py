"""A fake SGLang server: SGLang 0.5.x's HTTP protocol, answered by the real local engine
(:class:`agentr1.gateway.backends.local.LocalBackend` on a tiny random model), so the token ids,
logprobs and finish reasons it returns are real and a client that works with it speaks SGLang.

What it implements, as the released server does (sgl-project/sglang python/sglang/srt/
entrypoints/http_server.py, managers/io_struct.py, managers/tokenizer_manager.py,
sampling/sampling_params.py, managers/schedule_batch.py; DESIGN.md section 4):

- ``POST|PUT /generate``: GenerateReqInput {text | input_ids, sampling_params, rid, return_logprob,
  logprob_start_len, top_logprobs_num, stream}; other top-level fields are ignored (a dataclass
  body). ``sampling_params`` become ``SamplingParams(**sampling_params)``, a msgspec Struct in
  0.5.17: an unknown key raises TypeError ("Unexpected keyword argument '<key>'"), which
  http_server.generate_request does not catch (it catches ValueError): a plain 500 "Internal
  Server Error", and in a stream (whose 200 is sent) a connection that breaks off without
  ``[DONE]``. Defaults max_new_tokens=128, temperature=1.0, top_p=1.0, top_k=-1 (whole
  vocabulary), skip_special_tokens=True; temperature below 1e-6 decodes greedily; verify()'s
  limits and the context checks -> 400 ``{"error": {"message"}}`` (_create_error_response); stop
  strings are refused under ``skip_tokenizer_init``. Answer {text, output_ids, meta_info{id,
  finish_reason, prompt_tokens, weight_version, num_retractions, input_token_logprobs,
  output_token_logprobs [[logprob, id, null]], output_token_logprobs_length, (input_top_logprobs,
  output_top_logprobs), reasoning_tokens, completion_tokens, cached_tokens, e2e_latency (once
  finished), response_sent_to_client_ts (the first answer sent)}} in that order
  (TokenizerManager._handle_batch_output, add_logprob_to_meta_info, _wait_one_response); no
  ``text`` under skip_tokenizer_init. Streaming: ``data: {...}`` events (text cumulative;
  output_ids and logprob lists cumulative, or incremental with ``stream_output=True`` as
  ``--stream-output``), errors in-band as ``data: {"error": {"message", "type":
  "invalid_request_error", "code": 400, "retryable": false}}``, then ``data: [DONE]``.
- Finish reasons (schedule_batch.py ``to_json``): {"type": "stop", "matched": id | string},
  {"type": "length", "length"}, {"type": "abort", "message": "Aborted", "status_code": null,
  "err_type": null} (FINISH_ABORT: the engine ended a running request). A request aborted before it
  ran (/abort_request, /pause_generation abort) answers as _handle_abort_req builds it: finish_reason
  {"type": "abort", "message": "Abort in waiting queue"}, meta_info {id, finish_reason,
  weight_version, e2e_latency, (logprob lists), completion_tokens} and ``text`` "" even without a
  tokenizer; the fake aborts every request that way (its engine returns no partial tokens).
- ``/health``, ``/health_generate``, ``/get_model_info`` (deprecated) and ``/model_info``
  {model_path, tokenizer_path, is_generation, preferred_sampling_params, weight_version,
  has_image_understanding, has_audio_understanding, model_type, architectures},
  ``/get_weight_version`` and ``/weight_version`` (404 in the ErrorResponse shape: deprecated),
  ``/v1/models`` (ModelCard: id, object, created, owned_by, root, parent, max_model_len),
  ``/flush_cache``, ``/abort_request``, ``/update_weights_from_disk`` {model_path, weight_version}
  -> {success, message, num_paused_requests} (400 with success false and "Failed to get weights
  iterator: <error>." when the checkpoint cannot be read: the old weights stay),
  ``/pause_generation`` {mode: abort | retract | in_place} (new requests wait; abort ends the
  running ones with finish_reason abort), ``/continue_generation``, ``/update_weights_from_tensor``
  {serialized_named_tensors: [one payload per rank], flush_cache, weight_version, ...} -> {success,
  message} (400 with success false): the payload is unpickled as SGLang does (base64 of torch's
  ForkingPickler: shared-memory file descriptors for CPU tensors here, CUDA IPC handles on a GPU).
  SGLang copies each request's tensors into the model at once; the local engine loads only whole
  state dicts, so the fake gathers a multi-request update's tensors and loads them with the request
  that flushes the cache (the last bucket of :meth:`SGLangBackend.update_weights_from_tensors`).

Limits of the fake, not of SGLang: min_p, penalties, n, grammars, ignore_eos and logit_bias only
at their neutral values (400 otherwise); stop_regex is refused. For tests: ``state.fail_next``
(statuses the next /generate calls answer with), ``state.unhealthy``, ``state.requests`` (bodies
received) and ``state.calls`` (control endpoints called, in order).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from tokenizers import Tokenizer

from agentr1.core.generation import GenerateRequest, GenerateResult, SamplingParams
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


@dataclass
class FakeSGLangState:
    engine: Any
    model_path: str
    served_model_name: str
    context_len: int
    stream_output: bool = False
    skip_tokenizer_init: bool = False
    weight_version: str = "default"
    paused: bool = False
    unhealthy: bool = False
    fail_next: list[int] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    running: dict[str, asyncio.Task[Any] | None] = field(default_factory=dict)
    aborted: set[str] = field(default_factory=set)
    decoder: Any = None
    pending_tensors: dict[str, Any] = field(default_factory=dict)  # buckets of a tensor update not loaded yet


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
    rid = str(body.get("rid") or f"{time.time_ns():x}")
    options = {"rid": rid, "return_logprob": bool(body.get("return_logprob")),
               "skip_special_tokens": sp.get("skip_special_tokens", True) is not False,
               "no_stop_trim": bool(sp.get("no_stop_trim")), "stream": bool(body.get("stream"))}
    return GenerateRequest(prompt_ids=[int(t) for t in ids], sampling=params, request_id=rid,
                           prompt_logprobs=bool(body.get("return_logprob")) and start == 0), options


WAITING_ABORT = {"type": "abort", "message": "Abort in waiting queue"}  # TokenizerManager._handle_abort_req


def _finish(result: GenerateResult | None, max_new: int, aborted: bool) -> dict[str, Any] | None:
    if aborted:
        return dict(WAITING_ABORT)
    if result is None:
        return None
    if result.finish_reason == "length":
        return {"type": "length", "length": max_new}
    if result.finish_reason == "abort":  # FINISH_ABORT().to_json()
        return {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
    return {"type": "stop", "matched": result.matched_stop}


def _body(state: FakeSGLangState, req: GenerateRequest, opts: dict[str, Any], ids: list[int], lps: list[float],
          tops: list[Any] | None, finish: dict[str, Any] | None, started: float, sent: int,
          scored: GenerateResult | None = None) -> dict[str, Any]:
    """One answer, or one stream event (``sent``: tokens already streamed, for incremental events), with
    meta_info's keys in the order the tokenizer manager writes them (module docstring); ``scored``: the result
    whose prompt log-probabilities go in ``input_token_logprobs`` (logprob_start_len 0)."""
    cut = sent if opts["stream"] and state.stream_output else 0
    aborted = finish == WAITING_ABORT
    meta: dict[str, Any] = {"id": opts["rid"], "finish_reason": finish}
    if not aborted:
        meta.update(prompt_tokens=len(req.prompt_ids), weight_version=state.weight_version, num_retractions=0)
    else:
        meta.update(weight_version=state.weight_version, e2e_latency=time.monotonic() - started)
    if opts["return_logprob"]:
        prompt = scored.prompt_logprobs if scored is not None and scored.prompt_logprobs else []
        meta["input_token_logprobs"] = [[lp, t, None] for lp, t in zip(prompt, req.prompt_ids, strict=False)]
        meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(lps, ids, strict=True)][cut:]
        meta["output_token_logprobs_length"] = len(ids)
        if req.sampling.top_logprobs:
            meta["input_top_logprobs"] = [[[x.logprob, x.token_id, None] for x in top] if i else None
                                          for i, top in enumerate(scored.prompt_top_logprobs or [])] if prompt else []
            meta["output_top_logprobs"] = [[[x.logprob, x.token_id, None] for x in top] for top in tops or []][cut:]
    if aborted:
        meta["completion_tokens"] = len(ids)
        return {"text": "", "output_ids": ids[cut:], "meta_info": meta}
    meta.update(reasoning_tokens=0, completion_tokens=len(ids), cached_tokens=0)
    if finish is not None:
        meta["e2e_latency"] = time.monotonic() - started
    if sent == 0:  # set once, on the first answer sent (_wait_one_response)
        meta["response_sent_to_client_ts"] = time.time()
    out: dict[str, Any] = {"output_ids": ids[cut:], "meta_info": meta}
    if not state.skip_tokenizer_init:
        text = state.decoder.decode(ids, skip_special_tokens=opts["skip_special_tokens"])
        matched = (finish or {}).get("matched")
        if isinstance(matched, str) and not opts["no_stop_trim"] and matched in text:
            text = text[: text.index(matched)]
        out = {"text": text, **out}
    return out


def create_app(engine: Any, *, model_path: str | Path, served_model_name: str | None = None,
               context_len: int | None = None, stream_output: bool = False,
               skip_tokenizer_init: bool = False) -> FastAPI:
    """A fake SGLang server on ``engine`` (a started LocalBackend); its state is ``app.state.fake``."""
    state = FakeSGLangState(engine=engine, model_path=str(model_path),
                            served_model_name=served_model_name or str(model_path),
                            context_len=context_len or engine.max_context, stream_output=stream_output,
                            skip_tokenizer_init=skip_tokenizer_init,
                            decoder=Tokenizer.from_file(str(Path(model_path) / "tokenizer.json")))
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
        except TypeError:  # not caught by SGLang's handler: Starlette's plain 500
            return PlainTextResponse("Internal Server Error", status_code=500)
        started = time.monotonic()
        task = asyncio.ensure_future(state.engine.generate(req))
        state.running[opts["rid"]] = task
        try:
            result: GenerateResult | None = await task
        except asyncio.CancelledError:
            if opts["rid"] not in state.aborted:
                raise
            result = None
        finally:
            state.running.pop(opts["rid"], None)
        aborted = result is None
        ids, lps = ([], []) if aborted else (result.output_ids, result.logprobs)
        tops = None if aborted else result.top_logprobs
        finish = _finish(result, req.sampling.max_new_tokens, aborted)
        return JSONResponse(_body(state, req, opts, ids, lps, tops, finish, started, 0, result))

    async def _events(body: dict[str, Any]) -> Any:
        def event(payload: dict[str, Any]) -> bytes:
            return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"  # orjson: compact

        try:
            req, opts = _parse(body, state)
        except ValueError as exc:  # after the 200: the error is reported in-band
            yield event(_stream_error(str(exc)))
            yield b"data: [DONE]\n\n"
            return
        # a TypeError (an unknown sampling key) propagates: the ASGI server breaks the connection off
        started, rid = time.monotonic(), opts["rid"]
        state.running[rid] = None
        ids: list[int] = []
        lps: list[float] = []
        tops: list[Any] = []
        sent = 0
        whole: GenerateResult | None = None
        try:
            if req.sampling.top_logprobs or req.prompt_logprobs:  # they come with the result: replay it
                whole = await state.engine.generate(req)
                deltas: Any = [([t], [lp], [top], None) for t, lp, top
                               in zip(whole.output_ids, whole.logprobs,
                                      whole.top_logprobs or [[]] * len(whole.output_ids), strict=True)]
                deltas[-1] = (*deltas[-1][:3], whole)
            else:
                deltas = state.engine.stream(req)
            async for token_ids, logprobs, new_tops, result in _as_async(deltas):
                ids, lps, tops = ids + token_ids, lps + logprobs, tops + new_tops
                finish = _finish(result, req.sampling.max_new_tokens, rid in state.aborted)
                yield event(_body(state, req, opts, ids, lps, tops, finish, started, sent, whole))
                sent = len(ids)
                if finish is not None:
                    break
        finally:
            state.running.pop(rid, None)
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
                "model_type": config.get("model_type"), "architectures": config.get("architectures")}

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
        message = "Succeeded to update model weights."
        if body.get("weight_version") is not None:
            state.weight_version = str(body["weight_version"])
            message += f" Weight version updated to {state.weight_version}."
        return JSONResponse({"success": True, "message": message, "num_paused_requests": 0})

    @app.post("/update_weights_from_tensor")
    async def update_weights_from_tensor(request: Request) -> JSONResponse:
        body = await request.json()
        state.calls.append(("update_weights_from_tensor", {k: v for k, v in body.items()
                                                           if k != "serialized_named_tensors"}))
        try:
            state.pending_tensors.update(load_named_tensors(body["serialized_named_tensors"][0]))
            if body.get("flush_cache", True):
                tensors, state.pending_tensors = state.pending_tensors, {}
                await state.engine.update_weights_from_tensors(tensors)
        except Exception as exc:
            state.pending_tensors = {}
            return JSONResponse({"success": False, "message": f"{type(exc).__name__}: {exc}"}, status_code=400)
        if body.get("weight_version") is not None:
            state.weight_version = str(body["weight_version"])
        return JSONResponse({"success": True, "message": "Success"})

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


async def _as_async(deltas: Any) -> Any:
    """(token_ids, logprobs, top logprobs, result) from a LocalBackend stream or a list of them."""
    if isinstance(deltas, list):
        for item in deltas:
            yield item
        return
    async for delta in deltas:
        yield delta.token_ids, delta.logprobs, [], delta.result


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
    engine = LocalBackend(args.model_path, EngineOptions(device="cpu", max_batch_size=8, num_threads=1))
    engine.engine.start()
    app = create_app(engine, model_path=args.model_path, served_model_name=args.served_model_name,
                     context_len=args.context_length, stream_output=args.stream_output,
                     skip_tokenizer_init=args.skip_tokenizer_init)
    print(f"fake SGLang on {args.host}:{args.port} (base GPU {args.base_gpu_id})", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
