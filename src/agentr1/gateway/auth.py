"""Who may do what.

Access control is on when the gateway has an admin key (``--admin-key``) or a gateway-wide key
(``--api-key``); without either (a single-user, loopback gateway) everything but /admin is open.

When on:
- /admin/* needs the admin key.
- Anything that acts on one session (model calls attributed to it by path, ``X-Agentr1-Session`` or
  baggage; its trace, rewards and finish) needs that session's key or the admin key. The key may come
  as ``Authorization: Bearer``, ``X-Api-Key`` or ``X-Agentr1-Session-Key`` (the SDK adds the latter,
  since the agent's own client may carry an unrelated API key). No usable key: 401; a key of another
  session: 403.
- With ``--api-key``, creating a session and unattributed calls need it (or the admin key).
- A run key (``run_keys``: {run id: key}) separates runs: it creates sessions in its own run only and
  acts on that run's sessions only (other runs' sessions: 403, whether they exist or not); a model call
  with it must name its session (an unattributed call would land in the default run).

Keys are compared in constant time and never logged; the store only holds their SHA-256.
``--max-concurrent-per-key`` caps the requests in flight per presented key (429 with Retry-After).
"""

from __future__ import annotations

import hashlib
import hmac
import json

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from agentr1.gateway.errors import APIError, error_body
from agentr1.gateway.sessions import KEY_PREFIX, explicit_session

SESSION_KEY_HEADER = "x-agentr1-session-key"


def _keys_from(headers: dict[str, str]) -> list[str]:
    """The credentials a request presents, most specific first."""
    keys: list[str] = []
    auth = headers.get("authorization", "")
    bearer = auth[7:].strip() if auth.lower().startswith("bearer ") else None
    for key in (headers.get(SESSION_KEY_HEADER), bearer, headers.get("x-api-key")):
        key = (key or "").strip()
        if key and key not in keys:
            keys.append(key)
    return keys


def presented_keys(request: Request) -> list[str]:
    return _keys_from({k: request.headers[k] for k in (SESSION_KEY_HEADER, "authorization", "x-api-key")
                       if k in request.headers})


def _same(given: str, expected: str | None) -> bool:
    return bool(expected) and hmac.compare_digest(given.encode(), str(expected).encode())


def access_control_on(request: Request) -> bool:
    settings = request.app.state.gateway.settings
    return bool(settings.auth.admin_key or settings.auth.api_key or settings.auth.run_keys)


def run_of_key(request: Request) -> str | None:
    """The run a presented run key is confined to, if one is presented."""
    keys = presented_keys(request)
    for run_id, expected in request.app.state.gateway.settings.auth.run_keys.items():
        if any(_same(k, expected) for k in keys):
            return str(run_id)
    return None


def session_run(request: Request, asked: str | None) -> str | None:
    """The run a new session goes to: a run key's own (asking for another is a 403), else what was asked."""
    run = run_of_key(request)
    if run is None:
        require_gateway_key(request)
        return asked
    if asked is not None and asked != run:
        raise APIError(403, f"this key may only create sessions in run {run}", code="forbidden", param="run_id")
    return run


def require_admin(request: Request) -> None:
    expected = request.app.state.gateway.settings.auth.admin_key
    if not expected:
        raise APIError(403, "admin endpoints are disabled: start the gateway with --admin-key", code="admin_disabled")
    if not any(_same(k, expected) for k in presented_keys(request)):
        raise APIError(401, "admin key required (Authorization: Bearer <admin key>)", code="invalid_api_key")


def require_gateway_key(request: Request) -> None:
    """Creating sessions and unattributed calls: the gateway-wide key or the admin key, when ``--api-key`` is set."""
    settings = request.app.state.gateway.settings
    if not settings.auth.api_key:
        return
    if any(_same(k, settings.auth.api_key) or _same(k, settings.auth.admin_key) for k in presented_keys(request)):
        return
    raise APIError(401, "this gateway needs its API key (Authorization: Bearer <key>) or a session key",
                   code="invalid_api_key")


async def require_session_access(request: Request, session_id: str, also: str | None = None) -> None:
    """The session's own key or the admin key, when access control is on; ``also``: a key the request gives for
    this session besides its headers (an item of a list of sessions, each with its own key)."""
    if not access_control_on(request):
        return
    gw = request.app.state.gateway
    keys = presented_keys(request) + ([also] if also else [])
    if any(_same(k, gw.settings.auth.admin_key) for k in keys):
        return
    run = run_of_key(request)
    if run is not None:
        try:
            if (await gw.sessions.get(session_id)).run_id == run:
                return
        except APIError:  # unknown: a 403 as for another run's session, so the key learns nothing
            pass
        raise APIError(403, f"this key may only access sessions of run {run}", code="forbidden")
    other_session = False
    for key in keys:
        if key.startswith(KEY_PREFIX):
            owner = await gw.sessions.session_for_key(key)
            if owner is not None and hmac.compare_digest(owner.encode(), session_id.encode()):
                return
            other_session = other_session or owner is not None
    if other_session:
        raise APIError(403, f"this key may not access session {session_id}", code="forbidden")
    raise APIError(401, f"session {session_id} needs its key (Authorization: Bearer a1s-... or "
                        "X-Agentr1-Session-Key) or the admin key", code="invalid_api_key")


async def authorize_call(request: Request, path_session: str | None) -> None:
    """A model call: the key of the session it names, or (unattributed) the gateway key if there is one."""
    if not access_control_on(request):
        return
    sid = explicit_session(request, path_session)
    if sid is not None:
        await require_session_access(request, sid)
    elif run_of_key(request) is not None:
        raise APIError(400, "a call with a run key must name its session (base_url .../sessions/{id}/v1 or "
                            "X-Agentr1-Session)", code="session_required")
    elif not any(k.startswith(KEY_PREFIX) for k in presented_keys(request)):  # a session key attributes itself
        require_gateway_key(request)


class KeyConcurrencyLimit:
    """At most ``limit`` requests in flight per presented key (by its SHA-256); over it: 429 + Retry-After.

    Counts a request until its response has been sent whole (streams included). Requests without a key
    are not limited."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit
        self.in_flight: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.limit <= 0:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        keys = _keys_from(headers)
        if not keys:
            await self.app(scope, receive, send)
            return
        digest = hashlib.sha256(keys[0].encode()).hexdigest()
        if self.in_flight.get(digest, 0) >= self.limit:
            body = json.dumps(error_body(429, f"more than {self.limit} concurrent requests with this key",
                                         "too_many_concurrent_requests")).encode()
            await send({"type": "http.response.start", "status": 429,
                        "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        self.in_flight[digest] = self.in_flight.get(digest, 0) + 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight[digest] -= 1
            if not self.in_flight[digest]:
                del self.in_flight[digest]
