"""Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}}, never a traceback; on the
Anthropic Messages routes in Anthropic's: {"type": "error", "error": {"type", "message"}}."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentr1.core.generation import BackendError

log = logging.getLogger("agentr1.gateway")

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 409: "conflict_error", 413: "invalid_request_error",
          422: "invalid_request_error", 429: "rate_limit_error"}


_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 409: "invalid_request_error", 413: "request_too_large",
                    422: "invalid_request_error", 429: "rate_limit_error", 503: "overloaded_error"}
ANTHROPIC_PATH = re.compile(r"(^|/)v1/messages(/count_tokens)?/?$")


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``: Anthropic's shape, for its routes."""
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


class APIError(Exception):
    def __init__(self, status: int, message: str, *, code: str | None = None, param: str | None = None,
                 retry_after: float | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param, self.retry_after = status, message, code, param, retry_after
        self.headers = headers  # more headers of the answer (the session of a call whose step was stored)


def error_type(status: int) -> str:
    return _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    kind = error_type(status)
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_payload(status: int, message: str, path: str, *, code: str | None = None,
                  param: str | None = None) -> dict[str, Any]:
    """The error in the shape of the API at ``path``: Anthropic's for /v1/messages, OpenAI's elsewhere (the
    Responses API shares OpenAI's)."""
    if ANTHROPIC_PATH.search(path):
        return anthropic_error(status, message)
    return error_body(status, message, code, param)


def error_response(status: int, message: str, *, code: str | None = None, param: str | None = None,
                   retry_after: float | None = None, request: Request | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """The error in the shape of the API the request spoke (:func:`error_payload`)."""
    headers = dict(headers or {})
    if retry_after is not None:
        headers["Retry-After"] = str(max(1, round(retry_after)))
    path = request.url.path if request is not None else ""
    return JSONResponse(error_payload(status, message, path, code=code, param=param), status_code=status,
                        headers=headers or None)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request body", None
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    if first.get("type") == "json_invalid":
        reason = (first.get("ctx") or {}).get("error")
        return "request body is not valid JSON" + (f" ({reason})" if reason else ""), None
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"{param or 'body'}: {first.get('msg', 'invalid')}{more}", param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, code=exc.code, param=exc.param, retry_after=exc.retry_after,
                              request=request, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return error_response(400, message, code="invalid_request", param=param, request=request)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), request=request)

    @app.exception_handler(BackendError)
    async def _backend(request: Request, exc: BackendError) -> JSONResponse:
        log.warning("backend error: %s", exc)
        return error_response(exc.status_code, f"model backend failed: {exc}", code="backend_error",
                              retry_after=exc.retry_after if exc.retry_after is not None else 1.0, request=request)


class UnhandledErrors:
    """The innermost middleware: an exception no handler took (a bug) becomes a 500 in the API's shape, and the
    exception ends here. Starlette's own last handler answers the same 500 but re-raises the exception for the
    server to log, and uvicorn then closes the connection: a pooled client's next request on it failed with a
    connection reset. A stream whose answer had begun is cut off, as it must be (its status line is gone)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked_send)
        except Exception as exc:
            if started:
                raise
            log.exception("unhandled error")
            body = json.dumps(error_payload(500, f"internal error ({type(exc).__name__}); see the gateway log",
                                            scope.get("path", ""), code="internal_error")).encode()
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
