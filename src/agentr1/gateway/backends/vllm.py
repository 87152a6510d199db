"""The ``vllm`` backend: vLLM's OpenAI-compatible server through ``/v1/completions`` with token-id
prompts. Routing, retries, failover and the pause gate: :mod:`._remote`.

The protocol, as vLLM implements it (vllm-project/vllm ``vllm/entrypoints/openai/protocol.py``,
later ``openai/completion/protocol.py``; ``entrypoints/openai/api_server.py``, later
``entrypoints/serve/dev/*``; ``v1/sample/sampler.py``):

- ``POST /v1/completions`` {model, prompt: [token ids], max_tokens (always sent: the default is
  16), temperature, top_p, top_k (-1 = off), min_p, repetition/presence/frequency penalties (all
  sent: vLLM fills missing ones from the model's generation_config.json), seed (a per-request
  generator), stop, stop_token_ids, logprobs: k (0 = the sampled token's only),
  return_tokens_as_token_ids (tokens as ``"token_id:<id>"``), return_token_ids (``token_ids`` and
  ``prompt_token_ids`` in each choice; vLLM >= 0.10.2; older servers ignore unknown fields and the
  ids are read from the ``"token_id:<id>"`` tokens), request_id, prompt_logprobs: k (for
  ``GenerateRequest.prompt_logprobs``: each choice's ``prompt_logprobs`` [null, {"<id>": {logprob, rank,
  decoded_token}}, ...] holds the prompt's token and the alternatives of rank 1..k; a stream carries none, so such
  a request is answered whole)}.
- A choice: {text, logprobs {tokens, token_logprobs, top_logprobs [{token: logprob}], text_offset},
  finish_reason (stop | length | abort), stop_reason (the stop token id or stop string; null for
  the end-of-sequence token), token_ids}; ``usage``. Output token ids include the final
  end-of-sequence or stop token.
- Logprobs: with vLLM's default ``--logprobs-mode raw_logprobs`` they are log_softmax of the raw
  logits (temperature 1). Start vLLM (>= 0.10.2) with ``--logprobs-mode processed_logprobs`` for
  log_softmax(logits / temperature), the quantity the trainer recomputes (after top-k/top-p
  truncation, so equal to it when those are off, as in RL sampling).
- Streaming: ``data:`` chunks with the delta text, token_ids and logprobs (prompt_token_ids on the
  first), finish_reason on the last choice chunk, a usage chunk with empty choices, ``data: [DONE]``;
  errors in-band as ``data: {"error": {...}}``.
- Errors: ``{"error": {"message", "type", "param", "code": <http status>}}``: 400 BadRequestError
  (invalid request, context overflow), 404 NotFoundError (unknown model).
- ``GET /health`` (200 while the engine lives); ``GET /v1/models`` (``max_model_len``).
- Weights, with ``VLLM_SERVER_DEV_MODE=1``: ``POST /collective_rpc`` {method, args, kwargs, timeout}
  -> {"results": [one per worker]} runs a worker method: ``reload_weights(weights_path=path)`` loads
  the checkpoint at ``path`` in place (``weight_reload="weights_path"``, the default; seen working on
  vLLM 0.25.0 on an H200, where ``update_config`` fails with "Field 'model_arch_config' not found in
  ModelConfig"); ``weight_reload="update_config"``: ``update_config({"model_config": {"model":
  path}})`` then ``reload_weights()``, for servers whose ``reload_weights`` takes no path;
  ``"in_place"``: only ``reload_weights()``, for a trainer that overwrites the served directory;
  then ``POST /reset_prefix_cache`` drops KV computed with the old weights. vLLM reports no weight
  version: the policy version is this backend's counter.
- Pause/resume (``pause_mode``): "sleep" = ``POST /sleep?level=N`` / ``POST /wake_up`` (dev mode
  and ``--enable-sleep-mode``; frees GPU memory, e.g. for a colocated trainer), "pause" = ``POST
  /pause?mode=wait`` / ``POST /resume`` (newer vLLM), "local" = only hold requests in the gateway.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator
from typing import Any, Literal

import httpx

from agentr1.core.generation import BackendError, GenerateRequest, GenerateResult, StreamDelta, TokenLogprob

from ._http import Retry, Server, check, error_message, json_body, stream_events, transport_error
from ._remote import GrammarFields, RemoteBase, TokenOutput

__all__ = ["VLLMBackend"]

log = logging.getLogger(__name__)

GREEDY_BELOW = 1e-5  # as the local engine: temperatures below this decode greedily


def _token_id(token: str) -> int:
    if token.startswith("token_id:"):
        return int(token[len("token_id:"):])
    raise BackendError(f"vLLM returned the token {token!r} instead of 'token_id:<id>'")


# A grammar as vLLM's ``structured_outputs`` (vLLM >= 0.12, where the ``guided_*`` fields were removed): json (a
# schema), json_object, regex or grammar.
vllm_constraint = GrammarFields(json_object={"json_object": True},
                                json_schema=lambda schema: {"json": json.loads(schema)}, ebnf="grammar")


class _Output(TokenOutput):
    """The tokens of one completion choice, from a whole answer or from stream chunks (deltas)."""

    def add(self, choice: dict[str, Any]) -> tuple[list[int], list[float]]:
        lp = choice.get("logprobs") or {}
        tokens = [_token_id(t) for t in lp.get("tokens") or []]
        ids = [int(t) for t in choice["token_ids"]] if choice.get("token_ids") is not None else tokens
        if tokens and tokens != ids:
            raise BackendError("vLLM's logprob tokens do not match its token_ids")
        values = [float(v) for v in lp.get("token_logprobs") or []]
        if len(values) != len(ids):
            raise BackendError(f"vLLM sent {len(values)} logprobs for {len(ids)} tokens (is logprobs enabled?)")
        if self.top_n:
            for top in (lp.get("top_logprobs") or [])[: len(ids)]:
                ranked = sorted((top or {}).items(), key=lambda kv: -kv[1])[: self.top_n]
                self.top.append([TokenLogprob(_token_id(k), float(v)) for k, v in ranked])
        if self.scored_prompt is not None and self.prompt is None and choice.get("prompt_logprobs"):
            self._take_prompt(choice["prompt_logprobs"])
        self.ids += ids
        self.logprobs += values
        return ids, values

    def _take_prompt(self, entries: list[dict[str, Any] | None]) -> None:
        """vLLM's ``prompt_logprobs``: per position null (the first) or {"<id>": {logprob, rank, decoded_token}}
        holding the prompt's token and the ``rank`` 1..k alternatives."""
        assert self.scored_prompt is not None
        if len(entries) != len(self.scored_prompt):
            raise BackendError(f"vLLM scored {len(entries)} prompt tokens for a prompt of {len(self.scored_prompt)}")
        values: list[float | None] = [None]
        tops: list[list[TokenLogprob]] = [[]]
        for token, entry in zip(self.scored_prompt[1:], entries[1:], strict=True):
            own = (entry or {}).get(str(token))
            if own is None:
                raise BackendError("vLLM's prompt_logprobs do not hold the prompt's tokens")
            values.append(float(own["logprob"]))
            ranked = sorted(((int(t), v) for t, v in (entry or {}).items() if (v.get("rank") or 0) >= 1),
                            key=lambda tv: tv[1]["rank"])
            tops.append([TokenLogprob(t, float(v["logprob"])) for t, v in ranked if v["rank"] <= self.top_n])
        self.take_prompt(list(self.scored_prompt), values, tops, "vLLM")


class VLLMBackend(RemoteBase):
    """Generate on vLLM OpenAI-compatible servers at ``urls`` (see the module docstring).

    ``model_name`` and ``max_context`` default to what ``/v1/models`` says; ``tokenizer`` (a HF
    tokenizer or a local model directory) is what the gateway renders prompts with.
    ``extra_body`` is merged into every completion request as it is."""

    name = "vllm"
    accepts_grammar = True  # GenerateRequest.grammar -> structured_outputs (vllm_constraint)
    accepts_prompt_logprobs = True  # GenerateRequest.prompt_logprobs -> prompt_logprobs (streamed: answered whole)

    def __init__(self, urls: list[str] | str, *, model_name: str | None = None, max_context: int | None = None,
                 tokenizer: Any = None, timeout: float = 600.0, retries: int = 3,
                 weight_reload: Literal["weights_path", "update_config", "in_place"] = "weights_path",
                 pause_mode: Literal["sleep", "pause", "local"] = "sleep", sleep_level: int = 1,
                 extra_body: dict[str, Any] | None = None, weights_timeout_s: float = 1800.0, **options: Any) -> None:
        super().__init__(urls, model_name=model_name, max_context=max_context, tokenizer=tokenizer,
                         timeout=timeout, retries=retries, **options)
        self.weight_reload, self.pause_mode, self.sleep_level = weight_reload, pause_mode, sleep_level
        self.extra_body = dict(extra_body or {})
        self.weights_timeout_s = weights_timeout_s
        self._loaded: dict[str, str] = {}  # server url -> the checkpoint it last loaded (weights_path mode)

    # -- generation -----------------------------------------------------------------------

    def payload(self, request: GenerateRequest, *, stream: bool, attempt: int = 0) -> dict[str, Any]:
        """The ``/v1/completions`` body for ``request``."""
        p = request.sampling
        body: dict[str, Any] = {
            "model": self.model_name, "prompt": list(request.prompt_ids), "max_tokens": p.max_new_tokens,
            "temperature": 0.0 if p.temperature < GREEDY_BELOW else p.temperature, "top_p": p.top_p,
            "top_k": p.top_k if p.top_k > 0 else -1, "min_p": 0.0, "repetition_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "logprobs": p.top_logprobs,
            "return_tokens_as_token_ids": True, "return_token_ids": True, "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        if p.stop:
            body["stop"] = list(p.stop)
        if p.stop_token_ids:
            body["stop_token_ids"] = list(p.stop_token_ids)
        if p.seed is not None:
            body["seed"] = int(p.seed)
        if request.request_id:
            body["request_id"] = request.request_id if attempt == 0 else f"{request.request_id}-retry{attempt}"
        if request.grammar is not None:
            body["structured_outputs"] = vllm_constraint(request.grammar)
        if request.prompt_logprobs:  # vLLM's extra field: the prompt's log-probabilities and k alternatives
            body["prompt_logprobs"] = p.top_logprobs
        body.update(self.extra_body)
        return body

    async def _generate_once(self, server: Server, attempt: int, *, request: GenerateRequest) -> GenerateResult:
        r = await self._post(server, "/v1/completions", self.payload(request, stream=False, attempt=attempt))
        check(r, f"vLLM {server.url}")
        body = json_body(r)
        choice = body["choices"][0]
        out = _Output(request.sampling.top_logprobs, request.prompt_ids if request.prompt_logprobs else None)
        out.add(choice)
        prompt_tokens = (body.get("usage") or {}).get("prompt_tokens")
        return self._result(out, choice, request, prompt_tokens)

    async def _stream_once(self, server: Server, attempt: int, *,
                           request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        if request.prompt_logprobs:  # vLLM streams no prompt_logprobs: the whole answer, as one piece
            result = await self._generate_once(server, attempt, request=request)
            yield StreamDelta([], [], prompt_logprobs=result.prompt_logprobs,
                              prompt_top_logprobs=result.prompt_top_logprobs)
            yield StreamDelta([], [], result=result)
            return
        out = _Output(request.sampling.top_logprobs)
        body = self.payload(request, stream=True, attempt=attempt)
        final: dict[str, Any] | None = None
        prompt_tokens = None
        try:
            async for event in stream_events(self.client, server.url + "/v1/completions", body, f"vLLM {server.url}",
                                             error_status=_stream_error_status):
                prompt_tokens = (event.get("usage") or {}).get("prompt_tokens", prompt_tokens)
                for choice in event.get("choices") or []:
                    new_ids, new_lps = out.add(choice)
                    if choice.get("finish_reason") is not None:
                        final = choice
                    if new_ids:
                        yield StreamDelta(new_ids, new_lps, top_logprobs=out.newest_top(len(new_ids)))
        except httpx.HTTPError as exc:
            raise transport_error(exc, server, self.timeout) from exc
        if final is None:
            raise Retry(BackendError(f"vLLM {server.url} ended the stream before the generation finished"),
                        server_down=True)
        yield StreamDelta([], [], result=self._result(out, final, request, prompt_tokens))

    def _result(self, out: _Output, choice: dict[str, Any], request: GenerateRequest,
                prompt_tokens: int | None) -> GenerateResult:
        finish = choice.get("finish_reason")
        if finish not in ("stop", "length", "abort"):
            raise BackendError(f"vLLM finished with {finish!r}")
        matched = None
        if finish == "stop":  # stop_reason: the stop token id or string; null for the end-of-sequence token
            reason = choice.get("stop_reason")
            matched = reason if reason is not None else (out.ids[-1] if out.ids else None)
        return GenerateResult(
            output_ids=out.ids, logprobs=out.logprobs, finish_reason=finish,
            prompt_tokens=int(prompt_tokens or len(request.prompt_ids)), policy_version=self._version,
            matched_stop=matched, top_logprobs=out.top if request.sampling.top_logprobs else None,
            **out.prompt_fields("vLLM"),
        )

    # -- weights, pause, resume -----------------------------------------------------------

    async def update_weights(self, path: str) -> int:
        """Load the checkpoint at ``path`` (on the servers' filesystem) on every server: new requests
        wait, the gateway's requests in flight drain, then each server reloads (``weight_reload``: see
        the module docstring) through ``/collective_rpc`` and resets its
        prefix cache. A sleeping server is woken for the load and put back to sleep. Servers that fail
        while others succeed are taken out of rotation until an update succeeds on them."""
        async with self._weights_lock:
            self._updating += 1
            try:
                await self._drain(self.drain_timeout_s)
                targets = self._update_targets()
                asleep = self._paused and self.pause_mode == "sleep"
                if asleep:
                    await self._broadcast("/wake_up", servers=targets)
                errors = await self._gather_errors(targets, lambda s: self._reload(s, path))
                if asleep:
                    await self._broadcast("/sleep", params={"level": self.sleep_level}, servers=targets)
                return self._settle_update(self._version + 1, targets, errors)
            finally:
                self._updating -= 1

    async def _reload(self, server: Server, path: str) -> None:
        if self.weight_reload == "weights_path":
            try:
                await self._rpc(server, "reload_weights", kwargs={"weights_path": path})
            except (BackendError, Retry, httpx.HTTPError) as exc:  # a reset connection: it failed too
                await self._restore(server, exc)
                raise
            self._loaded[server.url] = path
        else:
            if self.weight_reload == "update_config":
                await self._rpc(server, "update_config", [{"model_config": {"model": path}}])
            await self._rpc(server, "reload_weights")
        r = await self._post(server, "/reset_prefix_cache")
        if r.status_code >= 400:
            log.warning("vLLM %s could not reset its prefix cache: %s", server.url, error_message(r))

    async def _restore(self, server: Server, failure: Exception) -> None:
        """After a failed ``reload_weights(weights_path=...)``: vLLM 0.25.0 has then overwritten part of
        the weights (a reload from a missing directory served newlines only, seen on the H200), so load
        the server's last good checkpoint again (its served model before any update). If that fails
        too, the server's weights are unknown: it leaves rotation until an update succeeds on it."""
        previous = self._loaded.get(server.url)
        try:
            if previous is None:
                r = await self.client.get(server.url + "/v1/models", timeout=self.health_timeout_s)
                previous = str(r.json()["data"][0]["root"])
            await self._rpc(server, "reload_weights", kwargs={"weights_path": previous})
            log.warning("vLLM %s: the update failed (%s); its weights of before (%s) were loaded again",
                        server.url, failure, previous)
        except (BackendError, Retry, httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
            server.weights_unknown = f"a failed update ({failure}) and no way back to {previous} ({exc})"
            log.error("vLLM %s holds unknown weights, out of rotation: %s", server.url, server.weights_unknown)

    async def _rpc(self, server: Server, method: str, args: list[Any] | None = None,
                   kwargs: dict[str, Any] | None = None) -> Any:
        body = {"method": method, "args": args or [], "kwargs": kwargs or {}, "timeout": self.weights_timeout_s}
        r = await self._post(server, "/collective_rpc", body, timeout=self.weights_timeout_s)
        if r.status_code == 404:
            raise BackendError(f"vLLM {server.url} has no /collective_rpc: start it with VLLM_SERVER_DEV_MODE=1")
        if r.status_code >= 400:
            raise BackendError(f"vLLM {server.url} {method}: {r.status_code} {error_message(r)}")
        return r.json().get("results") if r.content else None

    async def _gather_errors(self, servers: list[Server], action: Any) -> dict[str, str]:
        async def one(server: Server) -> str | None:
            try:
                await action(server)
            except (BackendError, Retry, httpx.HTTPError) as exc:
                return str(exc)
            return None

        results = await asyncio.gather(*(one(s) for s in servers))
        return {s.url: e for s, e in zip(servers, results, strict=True) if e is not None}

    async def pause(self) -> None:
        """Hold new requests, wait for the gateway's requests in flight, then (``pause_mode``) put
        every server to sleep or pause it."""
        self._paused = True
        await self._drain(None)
        if self.pause_mode == "sleep":
            answers = await self._broadcast("/sleep", params={"level": self.sleep_level})
        elif self.pause_mode == "pause":
            answers = await self._broadcast("/pause", params={"mode": "wait"})
        else:
            return
        self._log_failures("pause", answers)

    async def resume(self) -> None:
        if self.pause_mode != "local":
            answers = await self._broadcast("/wake_up" if self.pause_mode == "sleep" else "/resume")
            self._log_failures("resume", answers)
        self._paused = False


def _stream_error_status(error: Any) -> int:
    """vLLM's in-band stream errors carry the HTTP code they stand for: 400 is the caller's fault."""
    return 400 if isinstance(error, dict) and error.get("code") == 400 else 502
