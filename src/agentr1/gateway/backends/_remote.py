"""What the HTTP backends (SGLang, vLLM) share: retries with exponential backoff and failover over
a :class:`~._http.ServerPool` (sticky routing: see :mod:`._http`), and a gate that holds new
requests while weights change.

Failures. A connection error marks the server down for a cooldown that doubles while it keeps
failing (a success or a passing health probe clears it) and the request moves to the next server
at once. 429 and 5xx answers are retried with exponential backoff (``Retry-After`` honoured up to
``max_backoff_s``). Other 4xx answers fail at once as :class:`BackendError` carrying the server's
own message (status 400 for 400/413/422, else 502). When the attempts run out, connection failures,
429 and 503 end as :class:`BackendUnavailable` (the gateway answers 503 + Retry-After), anything
else as a 502 :class:`BackendError`. A timeout is not retried: the generation was probably running.
A non-streamed request that a weight update aborted is sampled again once the new weights are in.

Gate. ``pause()`` and ``update_weights()`` close the gate: new requests wait (up to
``gate_timeout_s``, then 503) and the requests in flight drain (up to ``drain_timeout_s`` for an
update) before the servers are touched, so a response is sampled by one policy version, as with
the local backend.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace
from functools import partial
from pathlib import PurePath
from typing import Any, TypeVar

import httpx

from agentr1.core.generation import (
    BackendError,
    BackendUnavailable,
    GenerateRequest,
    GenerateResult,
    GrammarSpec,
    StreamDelta,
    TokenLogprob,
)

from ._http import FastPoster, Retry, Server, ServerPool, error_message, route_key, transport_error
from .base import tokenizer_dir

log = logging.getLogger(__name__)

T = TypeVar("T")
# what parsing a body that is not the protocol's answer raises (json.JSONDecodeError is a ValueError)
MALFORMED = (ValueError, TypeError, KeyError, IndexError, AttributeError)


@dataclass(frozen=True)
class GrammarFields:
    """How one server's request carries a :class:`GrammarSpec` (call it with the spec): the fields for a JSON object,
    the fields for a JSON schema (from the schema's text), and the field of an EBNF grammar. A regex is
    ``{"regex": ...}`` on every server; forced tool calls go as xgrammar EBNF, which the servers' default grammar
    backend (xgrammar) parses."""

    json_object: dict[str, Any]
    json_schema: Callable[[str], dict[str, Any]]
    ebnf: str

    def __call__(self, spec: GrammarSpec) -> dict[str, Any]:
        if spec.kind == "json_object":
            return dict(self.json_object)
        if spec.kind == "json_schema":
            return self.json_schema(spec.value)
        if spec.kind == "regex":
            return {"regex": spec.value}
        if spec.kind == "ebnf":
            return {self.ebnf: spec.value}
        from agentr1.engine import to_ebnf  # (the engine's grammar module loads torch: only when a grammar is sent)

        return {self.ebnf: to_ebnf(spec)}


class TokenOutput:
    """The tokens of one generation as a server sends them, gathered from a whole answer or from
    stream events; each protocol's subclass parses its own ``add(body)``."""

    def __init__(self, top_n: int, scored_prompt: list[int] | None = None) -> None:
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.top: list[list[TokenLogprob]] = []
        self.top_n = top_n
        # the prompt's log-probabilities and alternatives (GenerateRequest.prompt_logprobs), once the server sent them
        self.scored_prompt = scored_prompt  # the prompt's ids when they were asked for
        self.prompt: tuple[list[float | None], list[list[TokenLogprob]]] | None = None
        self.prompt_sent = False  # streamed: the delta with them went out

    def take_prompt(self, ids: list[int], values: list[float | None], tops: list[list[TokenLogprob]],
                    server: str) -> None:
        """The prompt's scores as a server sent them, checked against the prompt (the first token has none)."""
        if ids != self.scored_prompt:
            raise BackendError(f"{server} scored other tokens than the prompt's")
        tops = [*tops[: len(ids)], *([[]] * (len(ids) - len(tops)))]
        self.prompt = ([None, *values[1:]], [[], *tops[1:]])

    def prompt_fields(self, server: str) -> dict[str, Any]:
        """``GenerateResult``'s prompt fields (none when not asked for; a server that sent none fails)."""
        if self.scored_prompt is None:
            return {}
        if self.prompt is None:
            raise BackendError(f"{server} answered without the prompt's log-probabilities")
        return {"prompt_logprobs": self.prompt[0], "prompt_top_logprobs": self.prompt[1]}

    def prompt_delta(self) -> StreamDelta | None:
        """A stream's delta with the prompt's log-probabilities, once, when they have arrived."""
        if self.prompt is None or self.prompt_sent:
            return None
        self.prompt_sent = True
        return StreamDelta([], [], prompt_logprobs=self.prompt[0], prompt_top_logprobs=self.prompt[1])

    def newest_top(self, n: int) -> list[list[TokenLogprob]] | None:
        """The alternatives of the ``n`` newest tokens (None when none were asked for)."""
        return self.top[len(self.top) - n:] if self.top_n else None


class RemoteBase:
    """Pool, HTTP client, retries and the pause gate; subclasses speak one server's protocol."""

    name = "remote"
    trainable = True
    accepts_images = False  # token ids only: no images go to the servers
    accepts_grammar = False  # each server protocol's subclass declares its own
    accepts_prompt_logprobs = False
    weights_in_memory = False  # a trainer's sync writes a directory the servers load
    releases_cache = False  # the servers keep their own caches
    reports_engine_stats = False  # (the servers' counters are on their own /metrics)
    health_path = "/health"

    def __init__(self, urls: list[str] | str, *, model_name: str | None, max_context: int | None, tokenizer: Any,
                 timeout: float, retries: int, backoff_s: float = 0.25, max_backoff_s: float = 8.0,
                 api_key: str | None = None, gate_timeout_s: float | None = None, drain_timeout_s: float = 60.0,
                 health_timeout_s: float = 5.0) -> None:
        self.pool = ServerPool([urls] if isinstance(urls, str) else list(urls))
        self.model_name = model_name or ""
        self.max_context = int(max_context or 0)
        self.tokenizer = tokenizer  # a HF tokenizer or a local model directory: the gateway renders with it
        self.model_path = tokenizer_dir(tokenizer)  # the served model's local directory, as far as the gateway knows
        self.timeout, self.retries = timeout, retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.gate_timeout_s = timeout if gate_timeout_s is None else gate_timeout_s
        self.drain_timeout_s, self.health_timeout_s = drain_timeout_s, health_timeout_s
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: httpx.AsyncClient | None = None
        self._poster: FastPoster | None = None
        self._version = 0
        self._paused = False
        self._updating = 0
        self._active = 0
        self._epoch = 0  # bumped by every weight update: aborted requests of an older epoch are retried
        self._weights_lock = asyncio.Lock()

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            raise BackendUnavailable(f"the {self.name} backend is not started", retry_after=5.0)
        return self._client

    async def start(self) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout, connect=min(5.0, self.timeout)),
                                             headers=self._headers)
        if self._poster is None:
            self._poster = FastPoster(timeout=self.timeout, headers=self._headers)
        await self._discover()

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        poster, self._poster = self._poster, None
        if poster is not None:
            await poster.close()

    async def ready(self) -> bool:
        """Started, not paused or updating, and some server up (down ones are probed again here)."""
        if self._client is None or self._paused or self._updating:
            return False
        if any(s.up for s in self.pool.servers):
            return True
        await self.probe()
        return any(s.up for s in self.pool.servers)

    async def probe(self) -> dict[str, bool]:
        """GET each server's health endpoint; mark it up or down accordingly."""
        async def one(server: Server) -> bool:
            try:
                r = await self.client.get(server.url + self.health_path, timeout=self.health_timeout_s)
                ok, why = r.status_code == 200, f"health check answered {r.status_code}"
            except httpx.HTTPError as exc:
                ok, why = False, f"health check failed: {exc!r}"
            if ok:
                self.pool.mark_up(server)
            else:
                self.pool.mark_down(server, why)
            return ok

        results = await asyncio.gather(*(one(s) for s in self.pool.servers))
        return {s.url: ok for s, ok in zip(self.pool.servers, results, strict=True)}

    async def _discover(self) -> None:
        """Fill in model_name and max_context from ``/v1/models`` where they were not given, and warn
        when the tokenizer directory does not look like the served model (prompts would be wrong)."""
        for server in self.pool.servers:
            try:
                r = await self.client.get(server.url + "/v1/models", timeout=self.health_timeout_s)
                card = r.json()["data"][0] if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError, KeyError, IndexError):
                card = None
            if card:
                self.model_name = self.model_name or str(card.get("id", ""))
                self.max_context = self.max_context or int(card.get("max_model_len") or 0)
                served = {PurePath(str(card.get(k) or "")).name for k in ("id", "root")} - {""}
                if isinstance(self.tokenizer, str) and PurePath(self.tokenizer).name not in served:
                    log.warning("%s backend: prompts are rendered with the tokenizer in %s but %s serves %s; they "
                                "must be the same model", self.name, self.tokenizer, server.url, sorted(served))
                break
        if not self.max_context:
            raise BackendUnavailable(f"no {self.name} server answered /v1/models at "
                                     f"{[s.url for s in self.pool.servers]}; pass max_context to start anyway",
                                     retry_after=5.0)
        self.model_name = self.model_name or self.name

    # -- generation: subclasses implement _generate_once and _stream_once ------------------

    async def _generate_once(self, server: Server, attempt: int, *, request: GenerateRequest) -> GenerateResult:
        raise NotImplementedError

    def _stream_once(self, server: Server, attempt: int, *,
                     request: GenerateRequest) -> AsyncGenerator[StreamDelta, None]:
        raise NotImplementedError

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        key = route_key(request)
        for again in range(self.retries + 1):
            if again:  # a fresh request id: the server may still know the aborted one
                request = replace(request, request_id=f"{request.request_id or 'agentr1'}-again{again}")
            await self._enter()
            epoch = self._epoch
            try:
                result = await self._attempts(key, partial(self._generate_once, request=request))
            finally:
                self._leave()
            if result.finish_reason == "abort" and (self._updating or self._epoch != epoch):
                continue  # aborted by a weight update: sample again, from the new weights only
            return result
        return result

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamDelta]:
        """Deltas as the server streams them; the last carries the result. Another server is tried
        only while nothing was yielded."""
        return self._stream(request)

    async def _stream(self, request: GenerateRequest) -> AsyncIterator[StreamDelta]:
        await self._enter()
        try:
            async for delta in self._stream_attempts(
                    route_key(request), partial(self._stream_once, request=request)):
                yield delta
        finally:
            self._leave()

    # -- the gate -------------------------------------------------------------------------

    async def _enter(self) -> None:
        deadline = time.monotonic() + self.gate_timeout_s
        while self._paused or self._updating:
            if time.monotonic() > deadline:
                raise BackendUnavailable(f"the {self.name} backend is paused (weights are being updated?)",
                                         retry_after=1.0)
            await asyncio.sleep(0.01)
        self._active += 1

    def _leave(self) -> None:
        self._active -= 1

    async def _drain(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._active > 0:
            if deadline is not None and time.monotonic() > deadline:
                log.warning("%s backend: %d requests still in flight after %.0f s", self.name, self._active, timeout)
                return False
            await asyncio.sleep(0.005)
        return True

    # -- attempts -------------------------------------------------------------------------

    async def _attempts(self, key: str | None, call: Callable[[Server, int], Awaitable[T]]) -> T:
        """Run ``call(server, attempt)`` until it succeeds or the attempts run out (module docstring):
        a stream of one item, so both kinds of call share one retry policy."""

        async def once(server: Server, attempt: int) -> AsyncGenerator[T, None]:
            yield await call(server, attempt)

        results = [result async for result in self._stream_attempts(key, once)]  # to the end: bookkeeping
        return results[0]

    async def _stream_attempts(self, key: str | None,
                               call: Callable[[Server, int], AsyncGenerator[T, None]]) -> AsyncIterator[T]:
        """As :meth:`_attempts` for a stream: another attempt only while nothing was yielded."""
        failed, delay = None, 0.0
        for attempt in range(self.retries + 1):
            server = await self._next_server(key, failed, delay)
            server.in_flight += 1
            yielded = False
            try:
                async with aclosing(call(server, attempt)) as items:
                    async for item in items:
                        yielded = True
                        yield item
            except MALFORMED as exc:
                raise self._malformed(server, exc) from exc
            except Retry as exc:
                delay = self._note_failure(server, exc, attempt)
                failed = server
                if yielded or attempt == self.retries:
                    raise exc.error from None
                continue
            finally:
                server.in_flight -= 1
            self.pool.mark_up(server)
            server.served += 1
            return

    def _malformed(self, server: Server, exc: Exception) -> BackendError:
        """A 200 whose body is not this protocol's answer (an HTML error page of a proxy, a wrong port,
        a broken server): a 502 with what was wrong, not the gateway's own 500. Not retried."""
        log.warning("%s server %s sent a malformed answer: %r", self.name, server.url, exc)
        return BackendError(f"{server.url} sent a malformed answer, not a {self.name} generate answer "
                            f"({type(exc).__name__}: {exc})"[:500])

    async def _next_server(self, key: str | None, failed: Server | None, delay: float) -> Server:
        ranked = self.pool.ranked(key)
        if not ranked:
            reasons = "; ".join(f"{s.url}: {s.weights_unknown}" for s in self.pool.servers)
            raise BackendUnavailable(f"no {self.name} server holds known weights ({reasons}); a successful "
                                     "update_weights puts them back in rotation", retry_after=30.0)
        server = ranked[0]
        if failed is not None and server is failed:  # no other server to move to: back off first
            await asyncio.sleep(delay)
        return server

    def _note_failure(self, server: Server, exc: Retry, attempt: int) -> float:
        if exc.server_down:
            self.pool.mark_down(server, str(exc.error))
        log.info("%s attempt %d on %s failed: %s", self.name, attempt + 1, server.url, exc.error)
        backoff = self.backoff_s * 2**attempt if exc.wait is None else exc.wait
        return min(self.max_backoff_s, backoff)

    def _settle_update(self, version: int, updated: list[Server], failures: dict[str, str]) -> int:
        """After a weight update on ``updated`` with ``failures`` (url -> why): raise if no server took
        the new weights; else take the failed and the skipped ones out of rotation (stale) and move
        to ``version``."""
        if len(failures) == len(updated):
            detail = "; ".join(f"{url}: {message}" for url, message in failures.items())
            raise BackendError(f"the weight update failed on every {self.name} server ({detail})")
        answered = {s.url for s in updated}
        for server in self.pool.servers:
            if server.url in failures or server.url not in answered:
                server.stale = True
                log.error("%s server %s missed weight version %d: out of rotation until an update succeeds on it "
                          "(%s)", self.name, server.url, version, failures.get(server.url, "down during the update"))
            else:
                server.stale, server.weights_unknown = False, None
        self._version = version
        self._epoch += 1
        log.info("%s backend: weights updated on %d servers, policy version %d", self.name,
                 len(updated) - len(failures), version)
        return version

    def _update_targets(self) -> list[Server]:
        now = time.monotonic()
        targets = [s for s in self.pool.servers if now >= s.down_until]
        if not targets:
            raise BackendUnavailable(f"no {self.name} server is up to load the weights", retry_after=5.0)
        return targets

    async def _post(self, server: Server, path: str, body: Any = None, *,
                    timeout: float | None = None, params: dict[str, Any] | None = None) -> httpx.Response:
        if self._client is None or self._poster is None:
            raise BackendUnavailable(f"the {self.name} backend is not started", retry_after=5.0)
        try:
            return await self._poster.post(server.url + path, body, timeout=timeout, params=params)
        except httpx.HTTPError as exc:
            raise transport_error(exc, server, self.timeout) from exc

    async def _broadcast(self, path: str, body: Any = None, *, servers: list[Server] | None = None,
                         **kw: Any) -> list[tuple[Server, httpx.Response | Exception]]:
        """POST to every server at once; each answer or the exception of its failure."""
        targets = self.pool.servers if servers is None else servers
        answers = await asyncio.gather(*(self._post_or_error(s, path, body, **kw) for s in targets))
        return list(zip(targets, answers, strict=True))

    async def _post_or_error(self, server: Server, path: str, body: Any = None, **kw: Any) -> httpx.Response | Exception:
        """:meth:`_post`, its failure returned instead of raised."""
        try:
            return await self._post(server, path, body, **kw)
        except Exception as exc:
            return exc

    def _log_failures(self, what: str, answers: list[tuple[Server, httpx.Response | Exception]]) -> None:
        for server, answer in answers:
            if isinstance(answer, Exception) or answer.status_code >= 400:
                detail = answer if isinstance(answer, Exception) else f"{answer.status_code} {error_message(answer)}"
                log.warning("could not %s %s server %s: %s", what, self.name, server.url, detail)
