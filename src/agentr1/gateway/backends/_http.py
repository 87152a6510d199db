"""HTTP plumbing of the remote backends: the server pool with sticky routing, error classification
and server-sent events. :mod:`._remote` builds the retry loop and the pause gate on it.

Routing. A request's route key (:func:`route_key`) picks its server by rendezvous hashing
(highest random weight): a key always prefers the same server, in every gateway process and
across restarts, so the calls of one session land on one server and reuse its prefix cache.
When that server is down the key falls over to its second choice; only the keys whose first
choice failed move. Requests without a key go to the server with the fewest requests in flight.

Client. The non-streamed POSTs (the generate calls) go through :class:`FastPoster`, an aiohttp
session: per request it costs a third of httpx's client CPU (bench/peer_profile.py). Its answers are
handed on as ``httpx.Response`` and its failures as the matching httpx errors, so the error
classification below is one for both clients. Streams and health probes stay on httpx.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import httpx
import orjson

from agentr1.core.generation import BackendError, BackendUnavailable, GenerateRequest

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
    weights_unknown: str | None = None  # why: a failed load left weights no version names; never served
    served: int = 0

    @property
    def up(self) -> bool:
        return not self.stale and not self.weights_unknown and time.monotonic() >= self.down_until


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
        otherwise), then the down ones, soonest back first. Stale servers only if nothing else; servers
        whose weights are unknown never (an empty list if that is all there is)."""
        if key is None:
            self._turn += 1
            n = len(self.servers)
            rotated = [self.servers[(i + self._turn) % n] for i in range(n)]
            order = sorted(rotated, key=lambda s: s.in_flight)
        else:
            order = sorted(self.servers, key=lambda s: _weight(key, s.url), reverse=True)
        order = [s for s in order if not s.weights_unknown]
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


def json_body(response: httpx.Response) -> Any:
    """The JSON of an answer, parsed by orjson (``httpx.Response.json`` uses the json module: 2% of the
    gateway's CPU per call at the peer benchmark's answer size)."""
    return orjson.loads(response.content)


def transport_error(exc: httpx.HTTPError, server: Server, timeout: float) -> Exception:
    """What a failed connection means: the server is down (retry elsewhere), or it timed out."""
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return BackendError(f"{server.url} did not answer within {timeout:g} s ({type(exc).__name__})",
                            status_code=504)
    return Retry(BackendUnavailable(f"{server.url} is unreachable: {type(exc).__name__}: {exc}",
                                    retry_after=2.0), server_down=True)


def _as_httpx_error(exc: BaseException, request: httpx.Request) -> httpx.HTTPError:
    """The httpx error that means what an aiohttp failure means (see :func:`transport_error`)."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(str(exc) or "connect timed out", request=request)
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return httpx.ReadTimeout(str(exc) or "read timed out", request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(str(exc), request=request)
    return httpx.ReadError(f"{type(exc).__name__}: {exc}", request=request)


def _closed_kept_alive(exc: BaseException) -> bool:
    """A request that failed on a pooled connection the server had closed (it could not be written, or the
    server hung up without an answer), not on a server that is down (refused connection) or slow: uvicorn
    closes a connection after an app error it logs as "Exception in ASGI application", which vLLM 0.25.0
    does after some error answers, and the next request on it fails at once (seen on the H200)."""
    return (isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError)
            and not isinstance(exc, aiohttp.ClientConnectorError))


class FastPoster:
    """JSON POSTs over one pooled aiohttp session (opened lazily inside the running loop).
    ``post`` answers an ``httpx.Response`` (without ``request``: read it with :func:`json_body`, not
    ``raise_for_status``) and raises httpx errors, as ``httpx.AsyncClient.post``."""

    def __init__(self, *, timeout: float, headers: dict[str, str], keepalive_s: float = 4.0) -> None:
        self.timeout, self.headers, self.keepalive_s = timeout, headers, keepalive_s
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # keep-alive shorter than uvicorn's 5 s, so the gateway, not the server, closes idle connections
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=self.keepalive_s)
            self._session = aiohttp.ClientSession(connector=connector, headers=self.headers,
                                                  json_serialize=lambda o: orjson.dumps(o).decode(),
                                                  skip_auto_headers=("User-Agent",))
        return self._session

    async def post(self, url: str, body: Any = None, *, timeout: float | None = None,
                   params: dict[str, Any] | None = None) -> httpx.Response:
        total = self.timeout if timeout is None else timeout
        limits = aiohttp.ClientTimeout(total=total, sock_connect=min(5.0, total))
        data = None if body is None else orjson.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else None
        for attempt in (0, 1):
            try:
                async with self._open().post(url, data=data, timeout=limits, params=params, headers=headers) as answer:
                    content = await answer.read()
                    # no httpx.Request: building one parses the URL, a tenth of the gateway's CPU per call in
                    # bench/peer_profile.py; nothing reads it from an answer (only the errors below carry one)
                    return httpx.Response(answer.status, headers=list(answer.headers.items()), content=content)
            except (TimeoutError, aiohttp.ClientError) as exc:
                if attempt == 0 and _closed_kept_alive(exc):
                    continue  # once more, on a new connection
                raise _as_httpx_error(exc, httpx.Request("POST", url)) from exc
        raise AssertionError("unreachable")

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


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




async def stream_events(client: httpx.AsyncClient, url: str, body: dict[str, Any], what: str, *,
                        error_status: Callable[[Any], int]) -> AsyncIterator[dict[str, Any]]:
    """POST ``body`` to ``url`` and yield the events of its SSE answer. An error status is raised as
    :func:`check` raises it; an in-band ``{"error": ...}`` event as a BackendError whose status
    ``error_status(error)`` gives. Transport errors propagate as httpx errors."""
    async with client.stream("POST", url, json=body) as response:
        if response.status_code >= 400:
            await response.aread()
            check(response, what)
        async for event in sse_events(response):
            if "error" in event:
                error = event["error"]
                message = error.get("message") if isinstance(error, dict) else error
                raise BackendError(f"{what}: {message}", status_code=error_status(error))
            yield event
