"""The backends' pooled POSTs survive a server that closes a kept-alive connection after an error.

uvicorn closes the connection when an app raises after it has answered ("Exception in ASGI application");
vLLM 0.25.0 does that after some error answers (a failed ``/collective_rpc``, seen on the H200), and the
next request sent on that connection failed at once. The server here is real uvicorn with a raw ASGI app
that does exactly that.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from backend_helpers import served

from agentr1.gateway.backends._http import FastPoster


async def answers_then_raises(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await receive()
    status = 200 if scope["path"] in ("/health", "/ok") else 500
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"path": "%s"}' % scope["path"].encode()})
    if scope["path"] == "/fails":
        raise RuntimeError("re-raised after the answer, as vLLM's exception handler does")


def test_a_request_after_an_error_that_closed_the_connection_is_answered():
    async def body(url: str) -> list[int]:
        poster = FastPoster(timeout=10.0, headers={})
        try:
            statuses = []
            for _ in range(20):
                for path in ("/fails", "/ok"):
                    statuses.append((await poster.post(url + path, {"x": 1})).status_code)
            return statuses
        finally:
            await poster.close()

    with served(answers_then_raises) as url:
        assert asyncio.run(body(url)) == [500, 200] * 20


def test_a_server_that_is_down_still_fails_at_once():
    async def body() -> None:
        poster = FastPoster(timeout=10.0, headers={})
        try:
            await poster.post("http://127.0.0.1:9/ok", {})
        finally:
            await poster.close()

    with pytest.raises(httpx.ConnectError):
        asyncio.run(body())
