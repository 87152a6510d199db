"""Run a gateway app under uvicorn in a background thread (tests, notebooks, examples)."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import httpx
import uvicorn
from fastapi import FastAPI


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BackgroundServer:
    """``with BackgroundServer(app) as url:`` serves ``app`` on a free loopback port until exit."""

    def __init__(self, app: FastAPI, *, port: int | None = None, ready_path: str = "/ready",
                 startup_timeout_s: float = 300.0) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready_path = ready_path
        self.startup_timeout_s = startup_timeout_s
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
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
