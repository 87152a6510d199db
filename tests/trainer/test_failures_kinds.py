"""The failure taxonomy on real exception objects of the libraries agents use (openai, httpx, asyncio):
what is infrastructure (never trained on as the policy's fault) and what is the agent's own bug."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from agentr1.sdk import (
    EnvironmentFailure,
    GatewayUnreachable,
    failure_error_text,
    failure_kind,
    failure_kind_of_error,
    tagged_error,
)

REQUEST = httpx.Request("POST", "http://127.0.0.1:8000/v1/chat/completions")


def status_error(cls: type, code: int) -> Exception:
    return cls(f"HTTP {code}", response=httpx.Response(code, request=REQUEST), body=None)


def chained(outer: Exception, inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception as exc:
            raise outer from exc
    except Exception as exc:
        return exc


@pytest.mark.parametrize(("exc", "kind"), [
    (TimeoutError(), "timeout"),
    (openai.APITimeoutError(request=REQUEST), "timeout"),
    (httpx.ReadTimeout("slow", request=REQUEST), "timeout"),
    (openai.APIConnectionError(request=REQUEST), "backend"),
    (status_error(openai.InternalServerError, 500), "backend"),
    (status_error(openai.APIStatusError, 503), "backend"),
    (GatewayUnreachable("no gateway"), "backend"),
    (status_error(openai.BadRequestError, 400), "agent"),  # e.g. a prompt longer than the context: the agent's
    (httpx.ConnectError("refused", request=REQUEST), "environment"),
    (ConnectionResetError(), "environment"),
    (httpx.HTTPStatusError("503", request=REQUEST, response=httpx.Response(503, request=REQUEST)), "environment"),
    (httpx.HTTPStatusError("404", request=REQUEST, response=httpx.Response(404, request=REQUEST)), "agent"),
    (EnvironmentFailure("sandbox crashed"), "environment"),
    (chained(RuntimeError("step failed"), httpx.ConnectError("refused", request=REQUEST)), "environment"),
    (asyncio.CancelledError(), "cancelled"),
    (KeyError("answer"), "agent"),
])
def test_failure_kinds(exc, kind):
    assert failure_kind(exc) == kind
    assert failure_kind_of_error(failure_error_text(exc)) == kind


def test_errors_without_a_kind_line_and_bad_kinds():
    assert failure_kind_of_error("Traceback (most recent call last): ...") is None
    assert failure_kind_of_error(None) is None
    assert failure_kind_of_error("agentr1-failure: gremlins\n...") is None
    assert failure_kind_of_error(tagged_error("timeout", "timed out after 3 s")) == "timeout"
    with pytest.raises(ValueError, match="failure kind must be one of"):
        tagged_error("gremlins", "")
