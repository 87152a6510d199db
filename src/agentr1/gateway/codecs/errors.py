"""Errors met after a stream's status line went out: reported in-band, in the format's own shape."""

from __future__ import annotations

from typing import Any

from agentr1.core.generation import BackendError

__all__ = ["failure", "stream_error"]


def failure(gw: Any, exc: BaseException) -> tuple[int, str, str | None]:
    """(status, message, code) of an exception that ended a stream; counts it."""
    gw.metrics.errors += 1
    status = int(getattr(exc, "status", getattr(exc, "status_code", 500)))
    message = getattr(exc, "message", None) or str(exc)
    code = getattr(exc, "code", None) or ("backend_error" if isinstance(exc, BackendError) else None)
    return status, message, code


def stream_error(gw: Any, exc: BaseException) -> dict[str, Any]:
    """OpenAI's in-band error object."""
    status, message, code = failure(gw, exc)
    return {"error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error",
                      "param": None, "code": code}}
