"""HTTP calls to the gateway's session API (sync and async), with the gateway's errors mapped
to SDK exceptions.

One short-lived client per call, all sharing one TLS context (:func:`shared_ssl_context`).
Building an httpx client builds a TLS context, which loads the CA bundle: 10-130 ms of blocking CPU.
With a client per call, as before, 128 concurrent sessions blocked their event loop for seconds
at a time, and calls timed out in the client although the gateway had answered (seen on the H200:
``GatewayUnreachable ... ()``, an empty ``ConnectTimeout``). With the shared context a client costs
about 1 ms. One long-lived client for all sessions is worse: httpcore scans every connection of
its pool for every request, and 256 concurrent sessions spent 90 s of CPU in that scan
(``tests/sdk/test_client_load.py``). A pool of one request never waits for a connection, so
there is no pool limit and no pool timeout to hit.

A transport failure says what it was: :class:`GatewayUnreachable` when no connection could be
made (refused, unknown host), :class:`GatewayTimeout` when the gateway did not answer in time
(connect, write, read or pool timeout), :class:`GatewayConnectionLost` when the connection broke;
each names the httpx exception, the call and the timeout.
"""

from __future__ import annotations

import os
import ssl
import threading
from typing import Any

import httpx

from agentr1.sdk.context import ActiveSession
from agentr1.sdk.errors import (
    GatewayConnectionLost,
    GatewayError,
    GatewayTimeout,
    GatewayUnreachable,
    SessionAlreadyFinished,
    UnknownStep,
)

DEFAULT_GATEWAY = "http://127.0.0.1:8000"
_config: dict[str, Any] = {}


def configure(gateway_url: str | None = None, *, admin_key: str | None = None, api_key: str | None = None,
              timeout_s: float | None = None) -> None:
    """Set the gateway the SDK talks to (default: $AGENTR1_GATEWAY_URL or http://127.0.0.1:8000).

    ``api_key``: the gateway's ``--api-key``, to create sessions (``admin_key`` works for that too)."""
    if gateway_url is not None:
        _config["gateway_url"] = gateway_url.rstrip("/")
    if admin_key is not None:
        _config["admin_key"] = admin_key
    if api_key is not None:
        _config["api_key"] = api_key
    if timeout_s is not None:
        _config["timeout_s"] = timeout_s


def configuration() -> dict[str, Any]:
    """What :func:`configure` set in this process, as its keyword arguments (to configure another process
    the same way: ``configure(**configuration())``)."""
    return dict(_config)


def gateway_url() -> str:
    return str(_config.get("gateway_url") or os.environ.get("AGENTR1_GATEWAY_URL") or DEFAULT_GATEWAY).rstrip("/")


def _timeout() -> float:
    return float(_config.get("timeout_s") or os.environ.get("AGENTR1_TIMEOUT_S") or 30.0)


def _raise_for(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if response.is_success:
        return body  # type: ignore[no-any-return]
    error = body.get("error") if isinstance(body, dict) else None
    message = (error or {}).get("message") or response.text[:300] or response.reason_phrase
    raise gateway_error(response.status_code, message, (error or {}).get("code"))


def gateway_error(status: int, message: str, code: str | None) -> GatewayError:
    """The SDK exception for an error the gateway answered."""
    kind = {"session_finished": SessionAlreadyFinished, "step_not_found": UnknownStep}.get(code or "", GatewayError)
    return kind(status, message, code)


def _describe(exc: BaseException) -> str:
    """``ReadTimeout`` or ``ConnectError: [Errno 111] ...``: never an empty detail."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def transport_error(url: str, method: str, path: str, exc: httpx.TransportError) -> Exception:
    """The SDK exception for a transport failure of ``method path`` on the gateway at ``url``."""
    what = f"{method} {url}{path}"
    if isinstance(exc, httpx.TimeoutException):
        phase = {httpx.ConnectTimeout: "to connect", httpx.PoolTimeout: "for a pooled connection",
                 httpx.WriteTimeout: "to send the request"}.get(type(exc), "for the answer")
        return GatewayTimeout(f"{what}: gave up after {_timeout():g} s waiting {phase} ({_describe(exc)}); the "
                              f"gateway or this process's event loop is overloaded; raise AGENTR1_TIMEOUT_S or "
                              f"agentr1.sdk.configure(timeout_s=...)")
    if isinstance(exc, httpx.ConnectError):
        return GatewayUnreachable(f"cannot reach the agentr1 gateway at {url} ({_describe(exc)}); start it with "
                                  f"`agentr1 gateway` or set AGENTR1_GATEWAY_URL")
    return GatewayConnectionLost(f"{what}: the connection to the gateway broke ({_describe(exc)})")


def _session_body(run_id: str | None, task_id: str | None, group_id: str | None,
                  metadata: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": metadata or {}}
    for key, value in (("run_id", run_id), ("task_id", task_id), ("group_id", group_id)):
        if value is not None:
            body[key] = str(value)
    return body


def _active(url: str, data: dict[str, Any]) -> ActiveSession:
    return ActiveSession(id=data["id"], gateway_url=url, base_url=data["base_url"], api_key=data["api_key"],
                         run_id=data.get("run_id"), task_id=data.get("task_id"), group_id=data.get("group_id"))


def _auth(session: ActiveSession | None) -> dict[str, str]:
    key = _config.get("admin_key") or (session.api_key if session else _config.get("api_key"))
    return {"Authorization": f"Bearer {key}"} if key else {}


_lock = threading.Lock()
_ssl: ssl.SSLContext | None = None


def shared_ssl_context() -> ssl.SSLContext:
    """One verifying TLS context for every client the SDK builds (building one loads the CA bundle)."""
    global _ssl
    with _lock:
        if _ssl is None:
            _ssl = httpx.create_ssl_context()
        return _ssl


def request(method: str, path: str, session: ActiveSession | None = None, json: Any = None) -> dict[str, Any]:
    """A blocking call to the gateway (sync agents, the subprocess runner)."""
    url = gateway_url() if session is None else session.gateway_url
    try:
        with httpx.Client(timeout=_timeout(), verify=shared_ssl_context()) as client:
            response = client.request(method, url + path, headers=_auth(session), json=json)
    except httpx.TransportError as exc:
        raise transport_error(url, method, path, exc) from exc
    return _raise_for(response)


async def arequest(method: str, path: str, session: ActiveSession | None = None, json: Any = None,
                   url: str | None = None) -> dict[str, Any]:
    """The same call for async code: never blocks the event loop. ``url``: this gateway's instead of the
    session's or the configured one."""
    url = url or (gateway_url() if session is None else session.gateway_url)
    try:
        async with httpx.AsyncClient(timeout=_timeout(), verify=shared_ssl_context()) as client:
            response = await client.request(method, url + path, headers=_auth(session), json=json)
    except httpx.TransportError as exc:
        raise transport_error(url, method, path, exc) from exc
    return _raise_for(response)


# The session API as (method, path, body) triples, so sync and async callers share them.

def create_call(run_id: str | None, task_id: str | None, group_id: str | None,
                metadata: dict[str, Any] | None) -> tuple[str, str, None, dict[str, Any]]:
    return "POST", "/sessions", None, _session_body(run_id, task_id, group_id, metadata)


def create_many_call(sessions: list[dict[str, Any]]) -> tuple[str, str, None, list[dict[str, Any]]]:
    """Open sessions in one request; each of ``sessions`` has create_call's fields as keywords."""
    return "POST", "/sessions", None, [_session_body(s.get("run_id"), s.get("task_id"), s.get("group_id"),
                                                     s.get("metadata")) for s in sessions]


def reward_call(session: ActiveSession, value: float, name: str, step: int | None,
                source: str) -> tuple[str, str, ActiveSession, dict[str, Any]]:
    return "POST", f"/sessions/{session.id}/rewards", session, {"value": value, "name": name, "step": step,
                                                                "source": source}


def finish_call(session: ActiveSession, status: str, reward: float | None,
                error: str | None) -> tuple[str, str, ActiveSession, dict[str, Any]]:
    return "POST", f"/sessions/{session.id}/finish", session, {"status": status, "reward": reward, "error": error}


def finish_many_call(ends: list[tuple[ActiveSession, str, float | None, str | None]]) -> tuple[str, str, None, Any]:
    """End sessions in one request: (session, status, reward, error) each, each with its own key."""
    return "POST", "/sessions/finish", None, [{"id": s.id, "api_key": s.api_key, "status": status, "reward": reward,
                                               "error": error} for s, status, reward, error in ends]


def as_session(data: dict[str, Any], url: str | None = None) -> ActiveSession:
    """The session the gateway at ``url`` (default: the configured one) answered ``data`` for."""
    return _active(url or gateway_url(), data)
