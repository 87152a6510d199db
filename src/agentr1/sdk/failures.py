"""Why a rollout failed: the failure taxonomy the trainer relies on to never train a broken rollout.

A session that ends with an exception is marked ``failed`` by the SDK; the first line of its stored
``error`` names the kind of failure (``agentr1-failure: <kind>``), the traceback follows. Kinds:

- ``timeout``: the run or one of its calls ran out of time (``TimeoutError``, openai's
  ``APITimeoutError``, httpx timeouts);
- ``backend``: the model could not be reached or failed to answer (openai's connection errors and
  5xx answers, the gateway unreachable or answering with an error);
- ``environment``: a tool, tool server, sandbox or environment failed (:class:`EnvironmentFailure`,
  connection errors and 5xx answers of the agent's own HTTP calls);
- ``cancelled``: the run was cancelled (the trainer stopped);
- ``agent``: anything else: a bug of the agent itself.

The first four are infrastructure failures: they say nothing about the policy, so the trainer
never trains such a session as a zero reward (see ``agentr1.trainer.groups``).
"""

from __future__ import annotations

import asyncio
import traceback

from agentr1.sdk.errors import GatewayConnectionError, GatewayError, GatewayTimeout

__all__ = [
    "FAILURE_KINDS",
    "INFRASTRUCTURE_KINDS",
    "EnvironmentFailure",
    "failure_error_text",
    "failure_kind",
    "failure_kind_of_error",
    "is_infrastructure_error",
    "tagged_error",
]

FAILURE_KINDS = ("timeout", "backend", "environment", "cancelled", "agent")
INFRASTRUCTURE_KINDS = frozenset({"timeout", "backend", "environment", "cancelled"})
_PREFIX = "agentr1-failure: "


class EnvironmentFailure(RuntimeError):
    """A tool, tool server, sandbox or environment could not do its job: not the policy's fault.

    Raise it from a tool or an environment (``raise EnvironmentFailure("sandbox crashed") from exc``)
    to end the episode as an infrastructure failure instead of showing the error to the model."""


def _kind_of_one(exc: BaseException) -> str | None:
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, EnvironmentFailure):
        return "environment"
    if isinstance(exc, GatewayTimeout):  # the gateway did not answer in time: a timeout, not "unreachable"
        return "timeout"
    if isinstance(exc, GatewayConnectionError | GatewayError):  # unreachable, connection lost, an error answer
        return "backend"
    module = type(exc).__module__.split(".")[0]
    names = {c.__name__ for c in type(exc).__mro__}
    if module == "openai":  # checked by name: the SDK does not import openai
        if "APITimeoutError" in names:
            return "timeout"
        if "APIConnectionError" in names or "InternalServerError" in names:
            return "backend"
        if "APIStatusError" in names and int(getattr(exc, "status_code", 0) or 0) >= 500:
            return "backend"
        return None
    if isinstance(exc, TimeoutError) or (module == "httpx" and "TimeoutException" in names):
        return "timeout"
    if isinstance(exc, ConnectionError) or (module == "httpx" and "TransportError" in names):
        return "environment"  # the agent's own HTTP calls (tools, sandboxes); model calls go through openai
    if module == "httpx" and "HTTPStatusError" in names:
        status = int(getattr(getattr(exc, "response", None), "status_code", 0) or 0)
        return "environment" if status >= 500 else None  # a tool server's 5xx; a 4xx is the caller's request
    return None


def failure_kind(exc: BaseException) -> str:
    """The kind of failure ``exc`` (or an exception it was raised from) is; ``agent`` when none matches."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        kind = _kind_of_one(current)
        if kind is not None:
            return kind
        current = current.__cause__ or current.__context__
    return "agent"


def is_infrastructure_error(exc: BaseException) -> bool:
    return failure_kind(exc) in INFRASTRUCTURE_KINDS


def failure_error_text(exc: BaseException, limit: int = 20_000) -> str:
    """What the SDK stores as a failed session's ``error``: the kind line, then the traceback's end."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return tagged_error(failure_kind(exc), text[-limit:])


def tagged_error(kind: str, text: str) -> str:
    """``text`` as a failed session's ``error`` that names its failure ``kind``."""
    if kind not in FAILURE_KINDS:
        raise ValueError(f"failure kind must be one of {FAILURE_KINDS}, got {kind!r}")
    return f"{_PREFIX}{kind}\n{text}"


def failure_kind_of_error(error: str | None) -> str | None:
    """The kind recorded in a session's ``error`` text, or None when it carries none."""
    if not error or not error.startswith(_PREFIX):
        return None
    kind = error[len(_PREFIX):].split("\n", 1)[0].strip()
    return kind if kind in FAILURE_KINDS else None
