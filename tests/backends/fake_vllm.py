"""A fake vLLM server: vLLM's OpenAI-compatible HTTP protocol for ``/v1/completions``, answered by
the real local engine (:class:`agentr1.gateway.backends.local.LocalBackend` on a tiny random model),
so the token ids, logprobs and finish reasons it returns are real.

What it implements, as vLLM 0.25.0 does (vllm-project/vllm vllm/entrypoints/openai/completion/
protocol.py and serving.py, openai/engine/protocol.py, serve/utils/server_utils.py and error_response.py,
serve/dev/*; checked by tests/backends/test_vllm_fixture_replay.py against the fixtures in
tests/backends/fixtures/vllm/: ``recorded/`` from a real server, ``derived/`` from vLLM's own code):

- ``POST /v1/completions``: prompt as token ids or a string; ``model`` must be the served name
  (404 NotFoundError otherwise); max_tokens default 16, temperature 1.0, top_p 1.0, top_k 0/-1 =
  off; logprobs up to ``max_logprobs`` (20); return_token_ids, return_tokens_as_token_ids, seed, stop,
  stop_token_ids; fields it does not know are ignored (vLLM logs them). Logprobs are the local engine's,
  log_softmax(logits / temperature): vLLM's ``--logprobs-mode processed_logprobs`` with top-k/top-p
  off. ``top_logprobs`` dicts hold the sampled token first, then the top k. Token ids include the final
  end-of-sequence / stop token; ``stop_reason`` is the stop token id or string, null for EOS; the
  text leaves the stop string out. Answers are compact JSON (FastAPI's JSONResponse) with every field
  of vLLM's ``CompletionResponse`` (nulls included). Streaming: one ``data: {...}\n\n`` chunk per step
  (``exclude_unset``: every choice field, ``prompt_token_ids`` only on the first, null after), the
  finish reason on the last, a usage chunk (``exclude_none``) when ``stream_options.include_usage``,
  then ``data: [DONE]``.
- Errors, ``{"error": {"message", "type", "param", "code"}}`` as vLLM builds them: a body that fails
  request validation (malformed JSON, a prompt that is not token ids, a negative id, no prompt,
  negative logprobs) is 400 ``"Bad Request"`` with ``param`` the cleaned error location; what vLLM
  checks later is 400 ``BadRequestError`` with its message and ``(parameter=..., value=...)``: context
  overflow (``input_tokens``), logprobs over the limit, a negative temperature, max_tokens < 1, an empty
  prompt, an out-of-vocabulary id; an unknown model is 404 ``NotFoundError``; a JSON body that is not an
  object is 500 ``InternalServerError`` (vLLM's request validators call ``.get`` on it).
- ``GET /health``, ``GET /v1/models`` (a model card with ``max_model_len`` and one permission).
- With ``dev_mode`` (``VLLM_SERVER_DEV_MODE=1``): ``POST /collective_rpc`` {method, args, kwargs} for
  the worker methods ``reload_weights(weights_path=None)`` and ``update_config({"model_config":
  {"model": path}})`` (the latter fails on vLLM 0.25.0 with a ValueError: ``update_config_fails``) ->
  {"results": [null]} (any failure, an unknown method too, is a 500 InternalServerError "Call to
  collective_rpc method failed: ..."; the real server re-raises after answering, which closes the
  connection, and so does the fake: ``_ReraiseAfterAnswer``),
  ``POST /reset_prefix_cache``, ``POST /sleep?level=``, ``POST /wake_up``, ``GET /is_sleeping``,
  ``POST /pause?mode=``, ``POST /resume``, ``GET /is_paused``.

Limits of the fake, not of vLLM: n=1, no echo, no beam search, penalties and min_p only neutral
(400 "fake vLLM: ..." otherwise); validation messages are pydantic's, not vLLM's text (the type, param
and code are vLLM's). For tests: ``state.fail_next`` (statuses the next completions answer with),
``state.requests``, ``state.calls`` (control endpoints, in order).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import torch
from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from tokenizers import Tokenizer

from agentr1.core.generation import GenerateRequest, GenerateResult, SamplingParams


class ParamError(ValueError):
    """vLLM's VLLMValidationError: a message naming the parameter (and value) at fault."""

    def __init__(self, message: str, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.parameter, self.value = parameter, value

    def __str__(self) -> str:
        extras = [f"{k}={v}" for k, v in (("parameter", self.parameter), ("value", self.value)) if v is not None]
        return f"{super().__str__()} ({', '.join(extras)})" if extras else super().__str__()


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    prompt: list[Annotated[int, Field(ge=0)]] | str | None = None
    echo: bool | None = False
    logprobs: int | None = None
    max_tokens: int | None = 16
    n: int = 1
    seed: int | None = None
    stop: str | list[str] | None = []
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop_token_ids: list[int] | None = []
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    return_tokens_as_token_ids: bool | None = None
    return_token_ids: bool | None = None
    prompt_logprobs: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _checks(cls, data: Any) -> Any:  # vLLM's CompletionRequest validators (before the engine)
        if (logprobs := data.get("logprobs")) is not None and logprobs < 0:
            raise ParamError("`logprobs` must be a positive value.", "logprobs", logprobs)
        if data.get("stream_options") and not data.get("stream"):
            raise ParamError("Stream options can only be defined when `stream=True`.", "stream_options")
        if data.get("prompt") in (None, ""):
            raise ParamError("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
        return data


@dataclass
class FakeVLLMState:
    engine: Any
    model_path: str
    served_model_name: str
    max_model_len: int
    decoder: Any
    vocab_size: int
    dev_mode: bool = True
    max_logprobs: int = 20
    sleeping: bool = False
    paused: bool = False
    # vLLM's default --fingerprint-mode full: version and 8 hex digits of its config hash (parallelism 1)
    fingerprint: str = "vllm-0.25.0-" + "0" * 8
    worker_model_path: str = ""  # the worker's model_config.model: what reload_weights() loads
    update_config_fails: bool = True  # as on vLLM 0.25.0 (recorded: rpc_update_config); False: older servers
    fail_next: list[int] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, Any]] = field(default_factory=list)


def error(message: str, status: int = 400, kind: str = "BadRequestError", param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}},
                        status_code=status)


def param_error(exc: ParamError) -> JSONResponse:  # create_error_response(VLLMValidationError)
    return error(str(exc), 400, "BadRequestError", exc.parameter)


# pydantic's union-branch and wrapper markers in an error location (vLLM's clean_loc_for_param)
_INTERNAL_LOC = re.compile(r"[\[\]{}()]")
_INTERNAL_MARKERS = {"function-wrap", "function-after", "function-before", "function-plain", "json-or-python",
                     "lax-or-strict", "chain", "default", "nullable", "tagged-union", "union", "call", "arguments",
                     "is-instance", "is-subclass", "callable", "str", "int", "float", "bool", "bytes", "bytearray",
                     "list", "tuple", "dict", "set", "frozenset", "complex", "none", "nonetype"}


def validation_error(errors: list[dict[str, Any]]) -> JSONResponse:
    """vLLM's answer to a body that fails request validation: 400 "Bad Request", ``param`` from a
    validator's ParamError or else the first error's location without pydantic's internal markers."""
    param = next((e["ctx"]["error"].parameter for e in errors
                  if isinstance((e.get("ctx") or {}).get("error"), ParamError)), None)
    if param is None and errors and errors[0].get("loc"):
        loc = [str(p) for p in errors[0]["loc"]]
        parts = [p for p in loc if not _INTERNAL_LOC.search(p) and p.lower() not in _INTERNAL_MARKERS]
        param = ".".join(parts or loc)
    shown = [{k: v for k, v in e.items() if k != "ctx"} for e in errors]
    return error(f"{len(errors)} validation error{'s' if len(errors) != 1 else ''}: {shown}", 400, "Bad Request", param)


class _Invalid(Exception):
    def __init__(self, response: JSONResponse, *, reraised: bool = False) -> None:
        self.response, self.reraised = response, reraised


class _ReraiseAfterAnswer:
    """vLLM 0.25.0's exception handler answers some errors and lets the exception go on to uvicorn, which
    logs "Exception in ASGI application" and closes the connection (the next request sent on it fails):
    seen on the H200 for failed ``/collective_rpc`` calls, a body that is not an object, and prompts the
    input processor rejects. The fake's handlers mark those answers (``request.state.reraise``)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)
        reason = scope.get("state", {}).get("reraise") if scope["type"] == "http" else None
        if reason:
            raise RuntimeError(f"fake vLLM re-raises after its answer: {reason}")


def _to_request(body: CompletionRequest, state: FakeVLLMState) -> GenerateRequest:
    if body.model is not None and body.model != state.served_model_name:
        raise _Invalid(error(f"The model `{body.model}` does not exist.", 404, "NotFoundError", "model"))
    if body.n != 1 or body.echo:
        raise _Invalid(error("fake vLLM: only n=1 without echo is supported"))
    for name, neutral in (("min_p", 0.0), ("repetition_penalty", 1.0), ("presence_penalty", 0.0),
                          ("frequency_penalty", 0.0)):
        if getattr(body, name) not in (None, neutral):
            raise _Invalid(error(f"fake vLLM: {name} is not supported by the local engine"))
    ids = body.prompt if isinstance(body.prompt, list) else state.decoder.encode(body.prompt).ids
    max_tokens = 16 if body.max_tokens is None else body.max_tokens
    temperature = 1.0 if body.temperature is None else body.temperature
    checks = [  # in vLLM's order: the serving layer's prompt check, the renderer's length check, SamplingParams,
        # then the input processor (an empty prompt is refused first, as a plain 400: recorded 2026-12-02)
        (not ids, lambda: ParamError("You must pass at least one prompt")),
        (max_tokens > 0 and len(ids) + max_tokens > state.max_model_len, lambda: ParamError(
            f"This model's maximum context length is {state.max_model_len} tokens. However, you requested "
            f"{max_tokens} output tokens and your prompt contains {len(ids)} input tokens, for a total of "
            f"{len(ids) + max_tokens} tokens. Please reduce the length of the input prompt or the number of requested "
            "output tokens.", "input_tokens", len(ids))),
        (temperature < 0, lambda: ParamError(f"temperature must be non-negative, got {temperature}.", "temperature",
                                             temperature)),
        (max_tokens < 1, lambda: ParamError(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens",
                                            max_tokens)),
        ((body.logprobs or 0) > state.max_logprobs, lambda: ParamError(
            f"Requested sample logprobs of {body.logprobs}, which is greater than max allowed: {state.max_logprobs}",
            "logprobs", body.logprobs)),
    ]
    for failed, exc in checks:
        if failed:
            raise _Invalid(param_error(exc()))
    if max(ids) >= state.vocab_size:  # the input processor's ValueError: answered, then re-raised
        raise _Invalid(param_error(ParamError(f"Token id {max(ids)} is out of vocabulary")), reraised=True)
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    return GenerateRequest(prompt_ids=list(ids), request_id=str(getattr(body, "request_id", "") or ""),
                           sampling=SamplingParams(
                               max_new_tokens=max_tokens, temperature=0.0 if temperature < 1e-5 else temperature,
                               top_p=1.0 if body.top_p is None else body.top_p, top_k=max(0, body.top_k or 0),
                               stop=stop, stop_token_ids=list(body.stop_token_ids or []), seed=body.seed,
                               top_logprobs=body.logprobs or 0),
                           prompt_logprobs=body.prompt_logprobs is not None)


def _stop_reason(result: GenerateResult, req: GenerateRequest) -> int | str | None:
    matched = result.matched_stop
    if result.finish_reason != "stop" or matched is None:
        return None
    if isinstance(matched, str) or matched in req.sampling.stop_token_ids:
        return matched
    return None  # the end-of-sequence token


def _logprobs(state: FakeVLLMState, body: CompletionRequest, ids: list[int], lps: list[float],
              tops: list[Any] | None, offset: int) -> dict[str, Any] | None:
    if body.logprobs is None:
        return None

    def name(token: int) -> str:
        return f"token_id:{token}" if body.return_tokens_as_token_ids else state.decoder.decode([token])

    top_dicts = []
    for i, (token, lp) in enumerate(zip(ids, lps, strict=True)):
        entry = {name(token): lp}
        for alt in (tops[i] if tops and body.logprobs else [])[: body.logprobs]:
            entry.setdefault(name(alt.token_id), alt.logprob)
        top_dicts.append(entry)
    offsets, position = [], offset
    for token in ids:
        offsets.append(position)
        position += len(state.decoder.decode([token], skip_special_tokens=body.skip_special_tokens))
    return {"text_offset": offsets, "token_logprobs": lps, "tokens": [name(t) for t in ids],
            "top_logprobs": top_dicts}


def _prompt_logprobs(req: GenerateRequest, result: GenerateResult, k: int) -> list[dict[str, Any] | None] | None:
    """vLLM's ``prompt_logprobs`` of a choice: null, then per token {"<id>": {logprob, rank, decoded_token}} with
    the prompt's token and the alternatives of rank 1..k (the fake ranks a prompt token outside them k + 1)."""
    if result.prompt_logprobs is None:
        return None
    out: list[dict[str, Any] | None] = [None]
    for token, lp, alts in zip(req.prompt_ids[1:], result.prompt_logprobs[1:], (result.prompt_top_logprobs or [])[1:],
                               strict=True):
        entry = {str(a.token_id): {"logprob": a.logprob, "rank": r, "decoded_token": f"token_id:{a.token_id}"}
                 for r, a in enumerate(alts[:k], start=1)}
        entry.setdefault(str(token), {"logprob": lp, "rank": k + 1, "decoded_token": f"token_id:{token}"})
        out.append(entry)
    return out


def _text(state: FakeVLLMState, body: CompletionRequest, ids: list[int], stop_reason: Any) -> str:
    text = state.decoder.decode(ids, skip_special_tokens=body.skip_special_tokens)
    if isinstance(stop_reason, str) and not body.include_stop_str_in_output and stop_reason in text:
        text = text[: text.index(stop_reason)]
    return text


def _permission() -> dict[str, Any]:  # vLLM's ModelPermission, as /v1/models lists it
    return {"id": f"modelperm-{uuid.uuid4().hex[:16]}", "object": "model_permission", "created": int(time.time()),
            "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
            "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False, "organization": "*",
            "group": None, "is_blocking": False}


def _vocab_size(model_path: str | Path) -> int:
    return int(json.loads((Path(model_path) / "config.json").read_text())["vocab_size"])


def _dumps(payload: Any) -> str:  # what pydantic's model_dump_json and FastAPI's JSONResponse write
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def create_app(engine: Any, *, model_path: str | Path, served_model_name: str | None = None,
               max_model_len: int | None = None, dev_mode: bool = True) -> FastAPI:
    """A fake vLLM server on ``engine`` (a started LocalBackend); its state is ``app.state.fake``."""
    state = FakeVLLMState(engine=engine, model_path=str(model_path),
                          served_model_name=served_model_name or str(model_path),
                          max_model_len=max_model_len or engine.max_context, dev_mode=dev_mode,
                          decoder=Tokenizer.from_file(str(Path(model_path) / "tokenizer.json")),
                          vocab_size=_vocab_size(model_path))
    state.worker_model_path = str(model_path)
    app = FastAPI()
    app.add_middleware(_ReraiseAfterAnswer)
    app.state.fake = state

    def parse(raw: bytes) -> CompletionRequest | JSONResponse:
        """The body as vLLM reads it: JSON, then its request validators, then the model's fields."""
        try:
            data = json.loads(raw)
        except ValueError as exc:
            position = getattr(exc, "pos", 0)
            return validation_error([{"type": "json_invalid", "loc": ("body", position), "msg": "JSON decode error",
                                      "input": {}, "ctx": {"error": str(exc)}}])
        if not isinstance(data, dict):  # vLLM's validators call data.get(): an AttributeError, a 500
            return error(f"'{type(data).__name__}' object has no attribute 'get'", 500, "InternalServerError")
        try:
            return CompletionRequest.model_validate(data)
        except ValidationError as exc:
            return validation_error([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()])

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        body = parse(await request.body())
        if isinstance(body, JSONResponse):
            if body.status_code == 500:
                request.state.reraise = body.body.decode()
            return body
        state.requests.append(body.model_dump(exclude_unset=True))
        if state.fail_next:
            status = state.fail_next.pop(0)
            return error("injected failure", status, "InternalServerError" if status == 500 else "ServiceUnavailable")
        while state.sleeping or state.paused:
            await asyncio.sleep(0.01)
        try:
            req = _to_request(body, state)
        except _Invalid as exc:
            if exc.reraised:
                request.state.reraise = exc.response.body.decode()
            return exc.response
        cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        if body.stream:
            return StreamingResponse(_chunks(body, req, cid, created), media_type="text/event-stream")
        result = await state.engine.generate(req)
        reason = _stop_reason(result, req)
        choice = {"index": 0, "text": _text(state, body, result.output_ids, reason),
                  "logprobs": _logprobs(state, body, result.output_ids, result.logprobs, result.top_logprobs, 0),
                  "finish_reason": result.finish_reason, "stop_reason": reason,
                  "token_ids": result.output_ids if body.return_token_ids else None, "prompt_logprobs": _prompt_logprobs(req, result, body.prompt_logprobs or 0),
                  "prompt_token_ids": req.prompt_ids if body.return_token_ids else None, "routed_experts": None}
        usage = {"prompt_tokens": len(req.prompt_ids), "total_tokens": len(req.prompt_ids) + len(result.output_ids),
                 "completion_tokens": len(result.output_ids), "prompt_tokens_details": None}
        return JSONResponse({"id": cid, "object": "text_completion", "created": created,
                             "model": state.served_model_name, "choices": [choice], "service_tier": None,
                             "system_fingerprint": state.fingerprint, "usage": usage, "kv_transfer_params": None, "metrics": None})

    async def _chunks(body: CompletionRequest, req: GenerateRequest, cid: str, created: int) -> Any:
        def chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
            payload = {"id": cid, "object": "text_completion", "created": created, "model": state.served_model_name,
                       "choices": choices,
                       **({"usage": usage, "system_fingerprint": state.fingerprint} if usage else {})}
            return b"data: " + _dumps(payload).encode() + b"\n\n"

        if body.logprobs:  # top logprobs come with the result: replay it token by token
            whole = await state.engine.generate(req)
            deltas: list[Any] = [([t], [lp], None) for t, lp in zip(whole.output_ids, whole.logprobs, strict=True)]
            deltas[-1] = (*deltas[-1][:2], whole)
            tops = whole.top_logprobs
        else:
            deltas, tops = [], None
            async for delta in state.engine.stream(req):
                deltas.append((delta.token_ids, delta.logprobs, delta.result))
        ids: list[int] = []
        text = ""
        for i, (token_ids, lps, result) in enumerate(deltas):
            start = len(ids)
            ids += token_ids
            reason = _stop_reason(result, req) if result is not None else None
            full = _text(state, body, ids, reason)
            choice = {"index": 0, "text": full[len(text):],
                      "logprobs": _logprobs(state, body, token_ids, lps, tops[start:len(ids)] if tops else None,
                                            len(text)),
                      "finish_reason": result.finish_reason if result is not None else None, "stop_reason": reason,
                      "prompt_token_ids": req.prompt_ids if i == 0 and body.return_token_ids else None,
                      "token_ids": token_ids if body.return_token_ids else None}
            text = full
            yield chunk([choice])
        if (body.stream_options or {}).get("include_usage"):
            yield chunk([], {"prompt_tokens": len(req.prompt_ids), "total_tokens": len(req.prompt_ids) + len(ids),
                             "completion_tokens": len(ids)})
        yield b"data: [DONE]\n\n"

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": state.served_model_name, "object": "model",
                                            "created": int(time.time()), "owned_by": "vllm",
                                            "root": state.model_path, "parent": None,
                                            "max_model_len": state.max_model_len, "permission": [_permission()]}]}

    if not dev_mode:
        return app

    async def reload_weights(path: str) -> None:
        """vLLM 0.25.0 reloads layer by layer into the served parameters: a load that fails part way (a
        missing directory too) leaves weights of no checkpoint behind. Seen on the H200: after a reload
        from a missing path the server answered newlines only. Here: the 2-D weights zeroed."""
        try:
            await state.engine.update_weights(path)
        except Exception:
            served = state.engine.engine.model.state_dict()
            await state.engine.update_weights_from_tensors(
                {k: torch.zeros_like(v) if v.dim() == 2 else v.clone() for k, v in served.items()})
            raise

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request) -> Response:
        body = await request.json()
        method, args, kwargs = body.get("method"), body.get("args") or [], body.get("kwargs") or {}
        state.calls.append(("collective_rpc", method))
        try:
            if method == "update_config":
                if state.update_config_fails:
                    raise ValueError("Field 'model_arch_config' not found in ModelConfig.")
                state.worker_model_path = str(args[0]["model_config"]["model"])
            elif method == "reload_weights":
                if kwargs.get("weights_path") is not None:
                    state.worker_model_path = str(kwargs["weights_path"])
                await reload_weights(state.worker_model_path)
            else:
                raise NotImplementedError(f"Method '{method}' is not implemented.")  # the worker's words (recorded)
        except Exception as exc:  # vLLM's exception handler: the engine core's failure, a 500
            request.state.reraise = str(exc)
            return error(f"Call to collective_rpc method failed: {exc}", 500, "InternalServerError")
        return JSONResponse({"results": [None]})

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> Response:
        state.calls.append(("reset_prefix_cache", None))
        return Response(status_code=200)

    @app.post("/sleep")
    async def sleep(level: int = Query(1)) -> Response:
        state.calls.append(("sleep", level))
        state.sleeping = True
        return Response(status_code=200)

    @app.post("/wake_up")
    async def wake_up() -> Response:
        state.calls.append(("wake_up", None))
        state.sleeping = False
        return Response(status_code=200)

    @app.get("/is_sleeping")
    async def is_sleeping() -> dict[str, bool]:
        return {"is_sleeping": state.sleeping}

    @app.post("/pause")
    async def pause(mode: str = Query("abort")) -> JSONResponse:
        state.calls.append(("pause", mode))
        state.paused = True
        return JSONResponse({"status": "paused"})

    @app.post("/resume")
    async def resume() -> JSONResponse:
        state.calls.append(("resume", None))
        state.paused = False
        return JSONResponse({"status": "resumed"})

    @app.get("/is_paused")
    async def is_paused() -> dict[str, bool]:
        return {"is_paused": state.paused}

    return app
