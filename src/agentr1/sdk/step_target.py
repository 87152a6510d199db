"""Which step of the current session a reward or an anchor goes to, and the request that records it there.

``step`` is ``None`` (the whole session), a step index, or ``"last"``: the newest step the gateway answered in this
session, read from its response headers. After a streamed answer those headers did not say it, so the session's trace
is read once to learn it (:func:`learn_last_step`, :func:`alearn_last_step`). Used by :func:`agentr1.sdk.reward` and
:func:`agentr1.sdk.anchor`.
"""

from __future__ import annotations

from typing import Any

from agentr1.sdk.client import arequest, request, reward_call
from agentr1.sdk.context import ActiveSession, current_session
from agentr1.sdk.errors import NoActiveSession

__all__ = ["alearn_last_step", "learn_last_step", "step_reward_call"]


def step_reward_call(value: float, name: str, step: int | str | None, source: str) -> tuple[Any, ...]:
    """The request (method, path, session, body) that records reward ``name`` = ``value`` on ``step`` of the
    current session."""
    active = current_session()
    if active is None:
        raise NoActiveSession("reward() needs an active session: call it inside @rollout or `with session(...)`")
    if step == "last":
        if active.last_step is None:
            raise NoActiveSession("step='last': this session has made no model call yet")
        step = active.last_step
    return reward_call(active, float(value), name, step if step is None else int(step), source)


def learn_last_step(step: int | str | None) -> None:
    """When ``step`` is ``"last"`` and the response headers could not say which step that is: read it."""
    if (active := _stale(step)) is not None:
        _learn(active, request("GET", f"/sessions/{active.id}", active))


async def alearn_last_step(step: int | str | None) -> None:
    """:func:`learn_last_step` for async code."""
    if (active := _stale(step)) is not None:
        _learn(active, await arequest("GET", f"/sessions/{active.id}", active))


def _stale(step: int | str | None) -> ActiveSession | None:
    """The current session when ``step="last"`` cannot be read from response headers (after a stream)."""
    active = current_session()
    return active if step == "last" and active is not None and active.last_step_stale else None


def _learn(active: ActiveSession, trace: dict[str, Any]) -> None:
    indices = [s["index"] for s in trace.get("steps") or []]
    active.last_step = max(indices) if indices else active.last_step
    active.last_step_stale = False
