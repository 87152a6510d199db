"""Make every HTTP call to the gateway carry the current session, whatever client makes it.

The OpenAI SDK, LiteLLM (for OpenAI-compatible endpoints), LangChain's ChatOpenAI and the
OpenAI Agents SDK all send through httpx (openai 3.x through its successor ``httpx2``, which has
the same API). :func:`install` wraps ``Client.send`` and ``AsyncClient.send`` of each of the two
that is installed, once: a request to the gateway's host made while a session is active
gets the ``X-Agentr1-Session`` header, the session's key in ``X-Agentr1-Session-Key`` and an ``agentr1.session`` baggage entry (plus the W3C
trace context when OpenTelemetry is configured). Requests to any other host are not touched.
The step indices the gateway reports back are remembered for ``reward(step="last")``.
"""

from __future__ import annotations

import functools
import threading
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from agentr1.sdk.context import ActiveSession, current_session, install_thread_propagation

SESSION_HEADER = "X-Agentr1-Session"
SESSION_KEY_HEADER = "X-Agentr1-Session-Key"  # the session's key: the agent's client may carry an unrelated one
BAGGAGE_KEY = "agentr1.session"
_installed = False
_lock = threading.Lock()


_LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def _host(host: str) -> str:
    host = host.lower().strip("[]")
    return "127.0.0.1" if host in _LOOPBACK else host  # localhost, 127.0.0.1 and ::1 are one gateway


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, _host(parts.hostname or ""), port


def _targets_gateway(request: Any, session: ActiveSession) -> bool:
    url = request.url
    port = url.port or {"http": 80, "https": 443}.get(url.scheme)
    return (url.scheme, _host(url.host), port) == _origin(session.gateway_url)


def tag_request(request: Any) -> ActiveSession | None:
    session = current_session()
    if session is None or not _targets_gateway(request, session):
        return None
    request.headers.setdefault(SESSION_HEADER, session.id)
    if session.api_key:  # a gateway with access control needs the session's key with the session header
        request.headers.setdefault(SESSION_KEY_HEADER, session.api_key)
    entry = f"{BAGGAGE_KEY}={quote(session.id)}"
    baggage = request.headers.get("baggage")
    if not baggage or BAGGAGE_KEY not in baggage:
        request.headers["baggage"] = f"{baggage},{entry}" if baggage else entry
    _inject_trace_context(request)
    return session


def _inject_trace_context(request: Any) -> None:
    try:
        from opentelemetry import propagate
    except ImportError:
        return
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    for key, value in carrier.items():
        if key.lower() != "baggage":
            request.headers.setdefault(key, value)


def note_response(session: ActiveSession | None, response: Any) -> None:
    if session is None:
        return
    if response.headers.get("x-agentr1-session") != session.id:
        return
    steps = response.headers.get("x-agentr1-steps")
    if steps:
        session.last_step = max(int(s) for s in steps.split(","))
        session.last_step_stale = False
    else:  # a stream: its headers go out before its step exists; reward(step="last") asks the gateway
        session.last_step_stale = True


def _patch(module: Any) -> None:
    sync_send, async_send = module.Client.send, module.AsyncClient.send

    @functools.wraps(sync_send)
    def send(self: Any, request: Any, **kwargs: Any) -> Any:
        session = tag_request(request)
        response = sync_send(self, request, **kwargs)
        note_response(session, response)
        return response

    @functools.wraps(async_send)
    async def asend(self: Any, request: Any, **kwargs: Any) -> Any:
        session = tag_request(request)
        response = await async_send(self, request, **kwargs)
        note_response(session, response)
        return response

    module.Client.send = send
    module.AsyncClient.send = asend


def install() -> None:
    """Patch httpx (and httpx2) once (idempotent) and make threads inherit the session."""
    global _installed
    install_thread_propagation()
    with _lock:
        if _installed:
            return
        _patch(httpx)
        try:
            import httpx2
        except ImportError:
            pass
        else:
            _patch(httpx2)
        _installed = True
