"""Serving a gateway app under uvicorn: the connection settings every entry point shares
(:func:`uvicorn_options`: `agentr1 gateway`, :class:`BackgroundServer` for tests, notebooks and
examples, the benchmarks' gateway process).

Connections that survive load. Agents talk through pooled HTTP/1.1 clients: the OpenAI client
(httpx) keeps an idle connection for 5 s and then drops it; uvicorn closes an idle connection after
its ``timeout_keep_alive``, also 5 s by default. With equal timeouts a connection idle for about
5 s is sometimes reused by the client at the moment the server closes it, and the request dies
with ``httpx.ReadError`` / ``APIConnectionError`` (measured: 8 of 734 calls in a minute of 64
clients pausing ~5 s between calls, none with the keep-alive raised;
``tests/reliability/test_pooled_clients.py``). The gateway keeps idle connections for
``GatewaySettings.keep_alive_s`` (75 s), far longer than any pooled client does, so the client
always closes first. The listen backlog holds a burst of new connections; no concurrency limit
is set (a limit makes uvicorn answer 503 instead of queueing; per-key limits answer 429, see
``--max-concurrent-per-key``).

Per-call work: uvicorn writes its access log only at log level info or below (:func:`uvicorn_options`'s
``log_level``): at ``warning`` the line was built for every call and then dropped (~1-2% of the gateway's CPU
at 64 sessions, ``bench/peer_profile.py --sessions 64``).
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

__all__ = ["BACKLOG", "KEEP_ALIVE_S", "BackgroundServer", "free_port", "uvicorn_options"]

KEEP_ALIVE_S = 75.0  # GatewaySettings.keep_alive_s's default
BACKLOG = 4096  # pending connections the kernel holds (capped by net.core.somaxconn)


def uvicorn_options(settings: Any = None, *, keep_alive_s: float | None = None, log_level: str = "warning"
                    ) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` / ``uvicorn.Config`` that every gateway server uses:
    keep-alive from ``keep_alive_s``, else ``settings.keep_alive_s``, else :data:`KEEP_ALIVE_S`; the access log
    only where ``log_level`` shows it (info, debug, trace)."""
    if keep_alive_s is None:
        keep_alive_s = float(getattr(settings, "keep_alive_s", KEEP_ALIVE_S))
    return {"timeout_keep_alive": keep_alive_s, "backlog": BACKLOG, "limit_concurrency": None,
            "timeout_graceful_shutdown": 30, "log_level": log_level,
            "access_log": log_level.lower() in ("info", "debug", "trace")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BackgroundServer:
    """``with BackgroundServer(app) as url:`` serves ``app`` on a free loopback port until exit,
    with the gateway's connection settings (:func:`uvicorn_options`)."""

    def __init__(self, app: FastAPI, *, port: int | None = None, ready_path: str = "/ready",
                 startup_timeout_s: float = 300.0, keep_alive_s: float | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready_path = ready_path
        self.startup_timeout_s = startup_timeout_s
        options = uvicorn_options(keep_alive_s=keep_alive_s)
        options["timeout_graceful_shutdown"] = None  # stop() waits for the thread instead
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, lifespan="on", **options)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"agentr1-gateway-{self.port}", daemon=True)

    def start(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if not self.thread.is_alive():
                raise RuntimeError("the gateway stopped during startup; see the log above")
            try:
                if httpx.get(self.url + self.ready_path, timeout=2).status_code == 200:
                    return self.url
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"the gateway was not ready within {self.startup_timeout_s} s")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
