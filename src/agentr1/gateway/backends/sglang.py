"""The ``sglang`` backend: SGLang servers through their native ``/generate`` endpoint, token ids in
and out (the production path). Routing, retries, failover and the pause gate: :mod:`._remote`.

The protocol, as SGLang 0.5.x implements it (sgl-project/sglang ``python/sglang/srt/entrypoints/
http_server.py``, ``managers/io_struct.py``, ``managers/tokenizer_manager.py``,
``sampling/sampling_params.py``, ``managers/schedule_batch.py``, ``layers/sampler.py``):

- ``POST /generate`` {input_ids, sampling_params, return_logprob, logprob_start_len (-1: output
  only; 0, for ``GenerateRequest.prompt_logprobs``: the prompt's too, ``meta_info.input_token_logprobs``
  [[null, id, text], [logprob, id, text], ...] and ``input_top_logprobs`` [null, [[logprob, id, text], ...],
  ...]), top_logprobs_num, rid, stream} answers {text?, output_ids, meta_info}. Sampling keys sent:
  max_new_tokens (always: SGLang's default is 128), temperature (below 1e-5 sent as 0, which SGLang
  decodes greedily as top_k=1), top_p, top_k (-1 = off), min_p, repetition/frequency/presence
  penalties at their neutral values (so ``--preferred-sampling-params`` or the model's generation
  config cannot change the policy behind our back), stop, stop_token_ids, and the seed as
  ``sampling_seed`` (honoured only by servers started with ``--enable-deterministic-inference``;
  ``seed_param=None`` leaves it out for servers that predate the field). SGLang refuses unknown
  sampling keys (400); ``extra_sampling`` is passed as it is.
- ``meta_info``: prompt_tokens, completion_tokens, cached_tokens, weight_version, finish_reason
  ({"type": "stop", "matched": token id | stop string} | {"type": "length", "length"} |
  {"type": "abort", "message"}), output_token_logprobs [[logprob, token_id, text|null], ...] and
  output_top_logprobs (per token, the same triples). The logprobs are log_softmax(logits /
  temperature) before top-k/top-p truncation, the quantity verl recomputes; leave
  ``SGLANG_RETURN_ORIGINAL_LOGPROB`` unset (it switches to temperature-1 logprobs).
- Streaming: ``data: {...}`` events, then ``data: [DONE]``. ``text`` is cumulative; ``output_ids``
  and the logprob lists are cumulative by default and incremental with ``--stream-output`` (and in
  later versions); each event is aligned on ``meta_info.completion_tokens``, so both work. An error
  after the stream started arrives as ``data: {"error": {"message"}}``.
- Errors: 400 ``{"error": {"message"}}`` for invalid requests; ``/health`` and ``/health_generate``
  run a one-token generation (slow: used only to re-admit servers that failed).
- Weights: ``POST /pause_generation`` {mode}, ``POST /update_weights_from_disk`` {model_path,
  weight_version} (200 {success, message, num_paused_requests}; 400 with success false when the
  checkpoint cannot be loaded, and the server keeps its old weights), ``POST /continue_generation``.
  ``mode`` is abort | retract | in_place (newer servers; older ones take no body and abort).
  ``weight_version`` comes back in each answer's meta_info: the policy version of that result.
- Servers launched by verl run with ``--skip-tokenizer-init``: only input_ids work, and stop strings
  are refused (they need the tokenizer); stop token ids work.
- Input ids are not checked against the vocabulary: one past it reaches the embedding on the GPU, where a
  device-side assert ends the server (SGLang 0.5.17: no answer, then connection refused).
  So the backend refuses such prompts before sending them (:meth:`SGLangBackend.check_prompt`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx

from agentr1.core.generation import BackendError, GenerateRequest, GenerateResult, StreamDelta, TokenLogprob

from ._http import Retry, Server, check, json_body, stream_events, transport_error
from ._remote import GrammarFields, RemoteBase, TokenOutput
from .base import tokenizer_dir
from .tensor_ipc import DEFAULT_BUCKET_BYTES, serialize_named_tensors, tensor_buckets

__all__ = ["SGLangBackend"]

log = logging.getLogger(__name__)

GREEDY_BELOW = 1e-5  # as the local engine: temperatures below this decode greedily


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


_NOT_SENT = BackendError("not sent: the server refused an earlier bucket of this update")


def _accepted(answer: httpx.Response | Exception) -> bool:
    return isinstance(answer, httpx.Response) and answer.status_code == 200 and bool(_json(answer).get("success"))


def _new(items: list[Any], total: int, seen: int, what: str) -> list[Any]:
    """The items of a stream event that were not received yet, whether the event carries all of
    them (cumulative) or only the new ones (incremental)."""
    if len(items) == total:
        return items[seen:]
    if len(items) == total - seen:
        return items
    raise BackendError(f"SGLang sent {len(items)} {what} for {total} tokens after {seen}: cannot align them")


# A grammar in SGLang's ``sampling_params`` fields (one of json_schema, regex, ebnf: SGLang takes one).
sglang_constraint = GrammarFields(json_object={"json_schema": '{"type": "object"}'},
                                  json_schema=lambda schema: {"json_schema": schema}, ebnf="ebnf")


def _alternatives(top: list[Any] | None, n: int) -> list[TokenLogprob]:
    """SGLang's ``[[logprob, token id, text], ...]`` of one position (null: none), the first ``n``."""
    return [TokenLogprob(int(t[1]), float(t[0])) for t in (top or [])[:n]]


def served_vocabulary(tokenizer: Any) -> int | None:
    """How many input ids the served model has, as far as the backend's ``tokenizer`` (a model directory or a HF
    tokenizer loaded from one) tells: ``vocab_size`` in the directory's config.json (a vision-language model's
    ``text_config``'s), the rows of the embedding the server looks ids up in; else the tokenizer's length; None when
    neither is known."""
    directory = tokenizer_dir(tokenizer)
    try:
        config = json.loads((Path(directory) / "config.json").read_text()) if directory else {}
    except (OSError, ValueError):
        config = {}
    text_config = config.get("text_config")
    size = (text_config.get("vocab_size") if isinstance(text_config, dict) else None) or config.get("vocab_size")
    if isinstance(size, int) and size > 0:
        return size
    if tokenizer is None or isinstance(tokenizer, str) or not hasattr(tokenizer, "__len__"):
        return None
    return len(tokenizer)


class _Output(TokenOutput):
    """The tokens of one generation, gathered from a whole answer or from stream events."""

    def add(self, body: dict[str, Any]) -> tuple[list[int], list[float]]:
        meta = body.get("meta_info") or {}
        ids = [int(t) for t in body.get("output_ids") or []]
        total = int(meta.get("completion_tokens", len(self.ids) + len(ids)))
        new_ids = _new(ids, total, len(self.ids), "output_ids")
        entries = meta.get("output_token_logprobs")
        if entries is None:
            raise BackendError("SGLang answered without meta_info.output_token_logprobs")
        new_entries = _new(entries, total, len(self.logprobs), "output_token_logprobs")
        if [int(e[1]) for e in new_entries] != new_ids:
            raise BackendError("SGLang's output_token_logprobs do not match its output_ids")
        new_lps = [float(e[0]) for e in new_entries]
        if self.top_n:
            tops = _new(meta.get("output_top_logprobs") or [], total, len(self.top), "output_top_logprobs")
            self.top += [_alternatives(top, self.top_n) for top in tops]
        if self.scored_prompt is not None and self.prompt is None and meta.get("input_token_logprobs"):
            prompt = meta["input_token_logprobs"]  # logprob_start_len 0: [[logprob | null, id, text], ...]
            tops = [_alternatives(top, self.top_n) for top in meta.get("input_top_logprobs") or []]
            self.take_prompt([int(e[1]) for e in prompt], [None if e[0] is None else float(e[0]) for e in prompt],
                             tops, "SGLang")
        self.ids += new_ids
        self.logprobs += new_lps
        return new_ids, new_lps


class SGLangBackend(RemoteBase):
    """Generate on SGLang servers at ``urls`` (see the module docstring).

    ``model_name`` and ``max_context`` default to what ``/v1/models`` says. ``tokenizer`` (a HF
    tokenizer or a local model directory with the served model's tokenizer) is what the gateway
    renders prompts with. ``pause_mode``: how ``/pause_generation`` treats requests that are still
    running once the gateway's own have drained (``drain_timeout_s``): "abort" (default: they end
    with finish_reason abort, and the gateway's own are sampled again after the update) or
    "retract" (they resume after it, so their tokens mix two policies). Not "in_place": the paused
    requests would hold the lock that ``/update_weights_from_disk`` waits for. ``vocab_size``: the served model's
    input ids are below it (:meth:`check_prompt`); by default from the tokenizer (:func:`served_vocabulary`)."""

    name = "sglang"
    # a trainer's sync writes a directory unless told the servers share its machine (rollout.weight_sync): only the
    # caller knows where they run, so update_weights_from_tensors is there to be chosen, not the default
    weights_in_memory = False
    accepts_grammar = True  # GenerateRequest.grammar -> sampling_params json_schema / regex / ebnf (sglang_constraint)
    accepts_prompt_logprobs = True  # GenerateRequest.prompt_logprobs -> logprob_start_len 0 (input_token_logprobs)

    def __init__(self, urls: list[str] | str, *, model_name: str | None = None, max_context: int | None = None,
                 tokenizer: Any = None, timeout: float = 600.0, retries: int = 3,
                 seed_param: str | None = "sampling_seed", pause_mode: str = "abort",
                 extra_sampling: dict[str, Any] | None = None, weights_timeout_s: float = 1800.0,
                 vocab_size: int | None = None, **options: Any) -> None:
        super().__init__(urls, model_name=model_name, max_context=max_context, tokenizer=tokenizer,
                         timeout=timeout, retries=retries, **options)
        self.seed_param = seed_param
        self.pause_mode = pause_mode
        self.extra_sampling = dict(extra_sampling or {})
        self.weights_timeout_s = weights_timeout_s
        self.vocab_size = vocab_size or served_vocabulary(tokenizer)
        if self.vocab_size is None:
            log.warning("sglang backend: the served vocabulary is unknown (no tokenizer or vocab_size), so prompt ids "
                        "are sent unchecked; one past the vocabulary stops an SGLang server")

    async def start(self) -> None:
        await super().start()
        versions = []
        for server in self.pool.servers:  # a restarted gateway reports the servers' weight version
            try:
                r = await self.client.get(server.url + "/get_model_info", timeout=self.health_timeout_s)
                versions.append(self._version_of(r.json().get("weight_version")) if r.status_code == 200 else 0)
            except (httpx.HTTPError, ValueError, AttributeError):
                continue
        self._version = max([self._version, *versions])

    def _version_of(self, value: Any) -> int:
        try:
            return int(str(value))
        except ValueError:
            return self._version

    # -- generation -----------------------------------------------------------------------

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.check_prompt(request)
        return await super().generate(request)

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamDelta]:
        self.check_prompt(request)
        return super().stream(request)

    def check_prompt(self, request: GenerateRequest) -> None:
        """Refuse (400) a prompt with an id outside [0, vocab_size) before it is sent. SGLang does not check ids, and
        one past the vocabulary stops the server: every session on it fails, not only this request (module
        docstring). The gateway's own routes never send one (/v1/completions checks token-id prompts against the
        gateway's tokenizer, the others render with it); this guards the backend's direct users (a trainer's
        rollouts, scripts) and a tokenizer longer than the served model's vocabulary."""
        ids, size = request.prompt_ids, self.vocab_size
        if size is None or not ids or (min(ids) >= 0 and max(ids) < size):
            return
        position, bad = next((i, t) for i, t in enumerate(ids) if not 0 <= t < size)
        raise BackendError(f"prompt token id {bad} (position {position}) is outside the served model's vocabulary "
                           f"[0, {size}); not sent: SGLang does not check ids, and one past its vocabulary stops the "
                           "server", status_code=400)

    def payload(self, request: GenerateRequest, *, stream: bool, attempt: int = 0) -> dict[str, Any]:
        """The ``/generate`` body for ``request``."""
        p = request.sampling
        sampling: dict[str, Any] = {
            "max_new_tokens": p.max_new_tokens,
            "temperature": 0.0 if p.temperature < GREEDY_BELOW else p.temperature,
            "top_p": p.top_p, "top_k": p.top_k if p.top_k > 0 else -1, "min_p": 0.0,
            "repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
        }
        if p.stop:
            sampling["stop"] = list(p.stop)
        if p.stop_token_ids:
            sampling["stop_token_ids"] = list(p.stop_token_ids)
        if p.seed is not None and self.seed_param:
            sampling[self.seed_param] = int(p.seed)
        if request.grammar is not None:
            sampling.update(sglang_constraint(request.grammar))
        sampling.update(self.extra_sampling)
        rid = request.request_id or f"agentr1-{uuid.uuid4().hex}"
        body: dict[str, Any] = {"input_ids": list(request.prompt_ids), "sampling_params": sampling,
                                "return_logprob": True, "logprob_start_len": 0 if request.prompt_logprobs else -1,
                                "stream": stream, "rid": rid if attempt == 0 else f"{rid}-retry{attempt}"}
        if p.top_logprobs:
            body["top_logprobs_num"] = p.top_logprobs
        return body

    async def _generate_once(self, server: Server, attempt: int, *, request: GenerateRequest) -> GenerateResult:
        r = await self._post(server, "/generate", self.payload(request, stream=False, attempt=attempt))
        check(r, f"SGLang {server.url}")
        body = json_body(r)
        out = _Output(request.sampling.top_logprobs, request.prompt_ids if request.prompt_logprobs else None)
        out.add(body)
        return self._result(out, body.get("meta_info") or {}, request)

    async def _stream_once(self, server: Server, attempt: int, *,
                           request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        out = _Output(request.sampling.top_logprobs, request.prompt_ids if request.prompt_logprobs else None)
        body = self.payload(request, stream=True, attempt=attempt)
        try:
            async for event in stream_events(self.client, server.url + "/generate", body, f"SGLang {server.url}",
                                             error_status=lambda error: 400):
                new_ids, new_lps = out.add(event)
                if (scores := out.prompt_delta()) is not None:  # before the first tokens
                    yield scores
                meta = event.get("meta_info") or {}
                if meta.get("finish_reason") is not None:
                    yield StreamDelta(new_ids, new_lps, result=self._result(out, meta, request))
                    return
                if new_ids:
                    yield StreamDelta(new_ids, new_lps, top_logprobs=out.newest_top(len(new_ids)))
        except httpx.HTTPError as exc:
            raise transport_error(exc, server, self.timeout) from exc
        raise Retry(BackendError(f"SGLang {server.url} ended the stream before the generation finished"),
                    server_down=True)

    def _result(self, out: _Output, meta: dict[str, Any], request: GenerateRequest) -> GenerateResult:
        finish = meta.get("finish_reason")
        kind = finish.get("type") if isinstance(finish, dict) else finish
        if kind not in ("stop", "length", "abort"):
            raise BackendError(f"SGLang finished with an unknown reason {finish!r}")
        matched = finish.get("matched") if isinstance(finish, dict) else None
        if kind == "abort":
            log.info("SGLang aborted %s: %s", request.request_id, finish)
        return GenerateResult(
            output_ids=out.ids, logprobs=out.logprobs, finish_reason=kind,
            prompt_tokens=int(meta.get("prompt_tokens", len(request.prompt_ids))),
            policy_version=self._version_of(meta.get("weight_version")),
            matched_stop=matched if isinstance(matched, int | str) and not isinstance(matched, bool) else None,
            top_logprobs=out.top if request.sampling.top_logprobs else None,
            **out.prompt_fields("SGLang"),
        )

    # -- weights, pause, resume -----------------------------------------------------------

    async def update_weights(self, path: str) -> int:
        """Load the checkpoint at ``path`` (a directory on the servers' filesystem) on every server:
        new requests wait, the gateway's requests in flight drain, then ``/pause_generation``,
        ``/update_weights_from_disk`` and ``/continue_generation``. Returns the new policy version.

        If every server refuses the checkpoint (400: they keep their weights) this raises
        ValueError and nothing changed. Servers that fail while others succeed, or that were down,
        are taken out of rotation (stale) until an update succeeds on them."""

        async def load(targets: list[Server], version: int) -> list[tuple[Server, httpx.Response | Exception]]:
            return await self._broadcast("/update_weights_from_disk", {"model_path": path, "weight_version": str(version)},
                                         servers=targets, timeout=self.weights_timeout_s)

        return await self._paused_update(load, kept_on_refusal=True)

    async def update_weights_from_tensors(self, tensors: Mapping[str, Any] | Iterable[tuple[str, Any]], *,
                                          bucket_bytes: int = DEFAULT_BUCKET_BYTES, dtype: Any = None) -> int:
        """Load weights held in this machine's memory (CUDA tensors, or CPU tensors in shared memory) on
        every server through ``/update_weights_from_tensor``: no file, the servers copy from the trainer's
        memory (:mod:`.tensor_ipc`). Only for servers on this machine with one tensor-parallel rank (one
        payload per request). The same pause, drain and continue as :meth:`update_weights`; the tensors go in
        buckets of ``bucket_bytes`` (converted to ``dtype`` when given), the last one flushing the servers'
        prefix caches and setting the weight version.

        A server that refuses a bucket may hold part of the update (SGLang loads tensor by tensor), so unlike
        a refused checkpoint it serves nothing (``weights_unknown``) until an update succeeds on it; if every
        server failed this raises :class:`BackendError`."""

        async def load(targets: list[Server], version: int) -> list[tuple[Server, httpx.Response | Exception]]:
            answers: list[tuple[Server, httpx.Response | Exception]] = [(s, _NOT_SENT) for s in targets]
            buckets = tensor_buckets(tensors, bucket_bytes=bucket_bytes, dtype=dtype)
            bucket = next(buckets, None)
            while bucket is not None:
                following = next(buckets, None)
                fields = {"flush_cache": following is None, "abort_all_requests": False,
                          **({"weight_version": str(version)} if following is None else {})}
                healthy = [s for s, a in answers if a is _NOT_SENT or _accepted(a)]
                # a payload per server: a shared-memory descriptor can be taken once (CUDA IPC handles as well
                # under torch's reference counting), so each server unpickles its own
                sent = await asyncio.gather(*(self._post_or_error(
                    server, "/update_weights_from_tensor",
                    {"serialized_named_tensors": [serialize_named_tensors(bucket)], **fields},
                    timeout=self.weights_timeout_s) for server in healthy))
                by_url = {server.url: answer for server, answer in zip(healthy, sent, strict=True)}
                answers = [(s, by_url.get(s.url, a)) for s, a in answers]
                del bucket  # the servers copied it: free this bucket's converted tensors before the next one
                bucket = following
            return answers

        return await self._paused_update(load, kept_on_refusal=False)

    async def _paused_update(self, load: Any, *, kept_on_refusal: bool) -> int:
        """New requests wait, the gateway's in flight drain, the servers pause, ``load(targets, version)``
        runs, the servers continue; then :meth:`_apply_update` on its answers."""
        async with self._weights_lock:
            self._updating += 1
            try:
                await self._drain(self.drain_timeout_s)
                version = self._version + 1
                targets = self._update_targets()
                await self._broadcast("/pause_generation", {"mode": self.pause_mode}, servers=targets)
                try:
                    answers = await load(targets, version)
                finally:
                    if not self._paused:
                        await self._broadcast("/continue_generation", {}, servers=targets)
                return self._apply_update(version, answers, kept_on_refusal=kept_on_refusal)
            finally:
                self._updating -= 1

    def _apply_update(self, version: int, answers: list[tuple[Server, httpx.Response | Exception]], *,
                      kept_on_refusal: bool = True) -> int:
        failures: dict[str, str] = {}
        refused = 0
        for server, answer in answers:
            if _accepted(answer):
                continue
            body = _json(answer) if isinstance(answer, httpx.Response) else {}
            refused += isinstance(answer, httpx.Response) and answer.status_code == 400
            failures[server.url] = (str(body.get("message") or answer.text)[:500]
                                    if isinstance(answer, httpx.Response) else str(answer))
        if kept_on_refusal and failures and refused == len(answers):  # every server kept its old weights
            detail = "; ".join(f"{url}: {message}" for url, message in failures.items())
            raise ValueError(f"SGLang could not load the weights ({detail})")
        if not kept_on_refusal:  # a failed tensor update may have loaded part of its tensors: never served until fixed
            for server, _ in answers:
                if server.url in failures:
                    server.weights_unknown = f"a tensor update failed ({failures[server.url]}) after part of it " \
                                             "may have loaded"
        return self._settle_update(version, [s for s, _ in answers], failures)

    async def pause(self) -> None:
        """Hold new requests, wait for the gateway's requests in flight, then pause every server."""
        self._paused = True
        await self._drain(None)
        self._log_failures("pause", await self._broadcast("/pause_generation", {"mode": self.pause_mode}))

    async def resume(self) -> None:
        self._log_failures("resume", await self._broadcast("/continue_generation", {}))
        self._paused = False
