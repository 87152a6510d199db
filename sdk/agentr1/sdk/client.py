"""HTTP calls to the gateway's session API (sync and async), with the gateway's errors mapped
to SDK exceptions."""

from __future__ import annotations

import os
from typing import Any

import httpx

from agentr1.sdk.context import ActiveSession
from agentr1.sdk.errors import GatewayError, GatewayUnreachable, SessionAlreadyFinished, UnknownStep

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
    code = (error or {}).get("code")
    kind = {"session_finished": SessionAlreadyFinished, "step_not_found": UnknownStep}.get(code or "", GatewayError)
    raise kind(response.status_code, message, code)


def _unreachable(url: str, exc: Exception) -> GatewayUnreachable:
    return GatewayUnreachable(f"cannot reach the agentr1 gateway at {url} ({exc}); start it with "
                              f"`agentr1 gateway` or set AGENTR1_GATEWAY_URL")


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


def request(method: str, path: str, session: ActiveSession | None = None, json: Any = None) -> dict[str, Any]:
    """A blocking call to the gateway (sync agents, the subprocess runner)."""
    url = gateway_url() if session is None else session.gateway_url
    try:
        response = httpx.request(method, url + path, headers=_auth(session), timeout=_timeout(), json=json)
    except httpx.TransportError as exc:
        raise _unreachable(url, exc) from exc
    return _raise_for(response)


async def arequest(method: str, path: str, session: ActiveSession | None = None, json: Any = None) -> dict[str, Any]:
    """The same call for async code: never blocks the event loop."""
    url = gateway_url() if session is None else session.gateway_url
    try:
        async with httpx.AsyncClient(timeout=_timeout()) as client:
            response = await client.request(method, url + path, headers=_auth(session), json=json)
    except httpx.TransportError as exc:
        raise _unreachable(url, exc) from exc
    return _raise_for(response)


# The session API as (method, path, body) triples, so sync and async callers share them.

def create_call(run_id: str | None, task_id: str | None, group_id: str | None,
                metadata: dict[str, Any] | None) -> tuple[str, str, None, dict[str, Any]]:
    return "POST", "/sessions", None, _session_body(run_id, task_id, group_id, metadata)


def reward_call(session: ActiveSession, value: float, name: str, step: int | None,
                source: str) -> tuple[str, str, ActiveSession, dict[str, Any]]:
    return "POST", f"/sessions/{session.id}/rewards", session, {"value": value, "name": name, "step": step,
                                                                "source": source}


def finish_call(session: ActiveSession, status: str, reward: float | None,
                error: str | None) -> tuple[str, str, ActiveSession, dict[str, Any]]:
    return "POST", f"/sessions/{session.id}/finish", session, {"status": status, "reward": reward, "error": error}


def as_session(data: dict[str, Any]) -> ActiveSession:
    return _active(gateway_url(), data)
