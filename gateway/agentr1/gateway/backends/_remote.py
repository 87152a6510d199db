"""What the HTTP backends (SGLang, vLLM) share: a pool of servers with sticky routing, retries with
exponential backoff and failover, and a gate that holds new requests while weights change.

Routing. A request's route key (:func:`route_key`) picks its server by rendezvous hashing
(highest random weight): a key always prefers the same server, in every gateway process and
across restarts, so the calls of one session land on one server and reuse its prefix cache.
When that server is down the key falls over to its second choice; only the keys whose first
choice failed move. Requests without a key go to the server with the fewest requests in flight.

Failures. A connection error marks the server down for a cooldown that doubles while it keeps
failing (a success or a passing health probe clears it) and the request moves to the next server
at once. 429 and 5xx answers are retried with exponential backoff (``Retry-After`` honoured up to
``max_backoff_s``). Other 4xx answers fail at once as :class:`BackendError` carrying the server's
own message (status 400 for 400/413/422, else 502). When the attempts run out, connection failures,
429 and 503 end as :class:`BackendUnavailable` (the gateway answers 503 + Retry-After), anything
else as a 502 :class:`BackendError`. A timeout is not retried: the generation was probably running.

Gate. ``pause()`` and ``update_weights()`` close the gate: new requests wait (up to
``gate_timeout_s``, then 503) and the requests in flight drain before the servers are touched, so a
response is sampled by one policy version, as with the local backend.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from .base import BackendError, BackendUnavailable, GenerateRequest

log = logging.getLogger(__name__)

T = TypeVar("T")
SESSION_PREFIX = "session:"


def route_key(request: GenerateRequest) -> str | None:
    """The key that keeps a session on one server: ``request.session_id`` if the request has one,
    else ``<id>`` from a request id of the form ``"session:<id>:<rest>"``, else None."""
    session = getattr(request, "session_id", None)
    if session:
        return str(session)
    rid = request.request_id
    if rid.startswith(SESSION_PREFIX):
        key, sep, _ = rid[len(SESSION_PREFIX):].partition(":")
        if key and sep:
            return key
    return None


def _weight(key: str, url: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}\0{url}".encode(), digest_size=8).digest(), "big")


@dataclass
class Server:
    url: str
    in_flight: int = 0
    failures: int = 0
    down_until: float = 0.0
    stale: bool = False  # missed a weight update: out of rotation until one succeeds on it
    served: int = 0

    @property
    def up(self) -> bool:
        return not self.stale and time.monotonic() >= self.down_until


class ServerPool:
    def __init__(self, urls: list[str], *, cooldown_s: float = 1.0, max_cooldown_s: float = 30.0) -> None:
        unique = list(dict.fromkeys(u.rstrip("/") for u in urls))
        if not unique:
            raise ValueError("at least one server URL is needed")
        self.servers = [Server(u) for u in unique]
        self.cooldown_s, self.max_cooldown_s = cooldown_s, max_cooldown_s
        self._turn = 0

    def ranked(self, key: str | None) -> list[Server]:
        """The order to try servers in: up ones first (rendezvous order for a key, least loaded
        otherwise), then the down ones, soonest back first. Stale servers only if nothing else."""
        if key is None:
            self._turn += 1
            n = len(self.servers)
            rotated = [self.servers[(i + self._turn) % n] for i in range(n)]
            order = sorted(rotated, key=lambda s: s.in_flight)
        else:
            order = sorted(self.servers, key=lambda s: _weight(key, s.url), reverse=True)
        up = [s for s in order if s.up]
        down = sorted((s for s in order if not s.up and not s.stale), key=lambda s: s.down_until)
        return up + down or order

    def mark_down(self, server: Server, reason: str) -> None:
        server.failures += 1
        cooldown = min(self.max_cooldown_s, self.cooldown_s * 2 ** (server.failures - 1))
        server.down_until = time.monotonic() + cooldown
        log.warning("backend server %s is down for %.1f s: %s", server.url, cooldown, reason)

    def mark_up(self, server: Server) -> None:
        if server.failures:
            log.info("backend server %s is back", server.url)
        server.failures, server.down_until = 0, 0.0


class Retry(Exception):
    """An attempt failed in a way that another attempt may not; ``error`` is raised if none is left."""

    def __init__(self, error: BackendError, *, wait: float | None = None, server_down: bool = False) -> None:
        super().__init__(str(error))
        self.error, self.wait, self.server_down = error, wait, server_down


def error_message(response: httpx.Response) -> str:
    """The message of an error answer in any of the shapes servers use: ``{"error": {"message"}}``
    (OpenAI, vLLM, SGLang's native API), ``{"message"}``, ``{"detail"}`` (FastAPI) or plain text."""
    try:
        body = response.json()
    except (ValueError, json.JSONDecodeError):
        return response.text.strip()[:500] or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        for field in ("error", "message", "detail"):
            if isinstance(body.get(field), str | list):
                return str(body[field])[:500]
    return str(body)[:500]


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def check(response: httpx.Response, what: str) -> None:
    """Raise for an error answer: :class:`Retry` when another attempt may succeed, else BackendError."""
    status = response.status_code
    if status < 400:
        return
    message = f"{what} answered {status}: {error_message(response)}"
    wait = _retry_after(response)
    if status == 429 or status >= 500:
        error = (BackendUnavailable(message, retry_after=wait or 1.0) if status in (429, 503)
                 else BackendError(message))
        raise Retry(error, wait=wait)
    raise BackendError(message, status_code=400 if status in (400, 413, 422) else 502)


def transport_error(exc: httpx.HTTPError, server: Server, timeout: float) -> Exception:
    """What a failed connection means: the server is down (retry elsewhere), or it timed out."""
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return BackendError(f"{server.url} did not answer within {timeout:g} s ({type(exc).__name__})",
                            status_code=504)
    return Retry(BackendUnavailable(f"{server.url} is unreachable: {type(exc).__name__}: {exc}",
                                    retry_after=2.0), server_down=True)


async def sse_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON payloads of a ``text/event-stream`` body (``data: {...}`` lines), up to ``[DONE]``."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        if data:
            yield json.loads(data)


class RemoteBase:
    """Pool, HTTP client, retries and the pause gate; subclasses speak one server's protocol."""

    name = "remote"
    trainable = True
    health_path = "/health"

    def __init__(self, urls: list[str] | str, *, model_name: str | None, max_context: int | None, tokenizer: Any,
                 timeout: float, retries: int, backoff_s: float = 0.25, max_backoff_s: float = 8.0,
                 api_key: str | None = None, gate_timeout_s: float | None = None, drain_timeout_s: float = 60.0,
                 health_timeout_s: float = 5.0) -> None:
        self.pool = ServerPool([urls] if isinstance(urls, str) else list(urls))
        self.model_name = model_name or ""
        self.max_context = int(max_context or 0)
        self.tokenizer = tokenizer  # a HF tokenizer or a local model directory: the gateway renders with it
        self.timeout, self.retries = timeout, retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.gate_timeout_s = timeout if gate_timeout_s is None else gate_timeout_s
        self.drain_timeout_s, self.health_timeout_s = drain_timeout_s, health_timeout_s
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: httpx.AsyncClient | None = None
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
        await self._discover()

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

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
                ok = r.status_code == 200
            except httpx.HTTPError as exc:
                ok, r = False, exc
            (self.pool.mark_up if ok else lambda s: self.pool.mark_down(s, f"health check: {r}"))(server)
            return ok

        results = await asyncio.gather(*(one(s) for s in self.pool.servers))
        return {s.url: ok for s, ok in zip(self.pool.servers, results, strict=True)}

    async def _discover(self) -> None:
        """Fill in model_name and max_context from ``/v1/models`` where they were not given."""
        if self.model_name and self.max_context:
            return
        for server in self.pool.servers:
            try:
                r = await self.client.get(server.url + "/v1/models", timeout=self.health_timeout_s)
                card = r.json()["data"][0] if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError, KeyError, IndexError):
                card = None
            if card:
                self.model_name = self.model_name or str(card.get("id", ""))
                self.max_context = self.max_context or int(card.get("max_model_len") or 0)
                break
        if not self.max_context:
            raise BackendUnavailable(f"no {self.name} server answered /v1/models at "
                                     f"{[s.url for s in self.pool.servers]}; pass max_context to start anyway",
                                     retry_after=5.0)
        self.model_name = self.model_name or self.name

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
        """Run ``call(server, attempt)`` until it succeeds or the attempts run out (module docstring)."""
        failed, delay = None, 0.0
        for attempt in range(self.retries + 1):
            server = await self._next_server(key, failed, delay)
            server.in_flight += 1
            try:
                result = await call(server, attempt)
            except Retry as exc:
                delay = self._note_failure(server, exc, attempt)
                failed = server
                if attempt == self.retries:
                    raise exc.error from None
                continue
            finally:
                server.in_flight -= 1
            self.pool.mark_up(server)
            server.served += 1
            return result
        raise AssertionError("unreachable")

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

    async def _next_server(self, key: str | None, failed: Server | None, delay: float) -> Server:
        server = self.pool.ranked(key)[0]
        if failed is not None and server is failed:  # no other server to move to: back off first
            await asyncio.sleep(delay)
        return server

    def _note_failure(self, server: Server, exc: Retry, attempt: int) -> float:
        if exc.server_down:
            self.pool.mark_down(server, str(exc.error))
        log.info("%s attempt %d on %s failed: %s", self.name, attempt + 1, server.url, exc.error)
        backoff = self.backoff_s * 2**attempt if exc.wait is None else exc.wait
        return min(self.max_backoff_s, backoff)

    async def _post(self, server: Server, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        try:
            return await self.client.post(server.url + path, json=body, **kw)
        except httpx.HTTPError as exc:
            raise transport_error(exc, server, self.timeout) from exc

    async def _broadcast(self, path: str, body: Any = None, *, servers: list[Server] | None = None,
                         **kw: Any) -> list[tuple[Server, httpx.Response | Exception]]:
        """POST to every server at once; each answer or the exception of its failure."""
        targets = self.pool.servers if servers is None else servers

        async def one(server: Server) -> httpx.Response | Exception:
            try:
                return await self._post(server, path, body, **kw)
            except Exception as exc:
                return exc

        return list(zip(targets, await asyncio.gather(*(one(s) for s in targets)), strict=True))
