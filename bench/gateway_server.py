"""Run a gateway in its own process for benchmarks: `start_server(kind=..., model=..., db=...)`.

    python bench/gateway_server.py --kind instant --model tiny --db sqlite:///x.db --port 8123
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel


class FloorBody(BaseModel):
    model: str
    messages: list[dict[str, Any]]


class FloorSession(BaseModel):
    task_id: str | None = None
    group_id: str | None = None
    run_id: str | None = None
    metadata: dict[str, Any] | None = None


class FloorFinish(BaseModel):
    status: str


@dataclass
class RunningServer:
    url: str
    pid: int


@contextmanager
def start_server(*, kind: str, model: str, db: str, durable: bool = True) -> Iterator[RunningServer]:
    from agentr1.gateway.server import free_port

    port = free_port()
    cmd = [sys.executable, str(Path(__file__)), "--kind", kind, "--model", model, "--db", db, "--port", str(port)]
    if not durable:
        cmd.append("--fast-writes")
    proc = subprocess.Popen(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"benchmark gateway exited with {proc.returncode}")
            try:
                if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("benchmark gateway did not start")
            time.sleep(0.2)
        yield RunningServer(url, proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def floor_app(port: int):
    """The HTTP floor: the gateway's session routes (open, chat, finish) with pydantic bodies, answering at once and
    storing nothing.
    What the load generator and FastAPI/uvicorn cost by themselves on this machine."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/ready")
    async def ready() -> dict[str, bool]:
        return {"ready": True}

    @app.post("/sessions", status_code=201)
    async def session(body: FloorSession) -> dict[str, str]:
        return {"id": "s", "api_key": "k", "base_url": f"http://127.0.0.1:{port}/sessions/s/v1"}

    @app.post("/sessions/{sid}/v1/chat/completions")
    async def chat(sid: str, body: FloorBody) -> dict[str, Any]:
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}]}

    @app.post("/sessions/{sid}/finish")
    async def finish(sid: str, body: FloorFinish) -> dict[str, str]:
        return {"id": sid, "status": body.status}

    return app


def gateway_app(kind: str, model: str, db: str, *, durable: bool = True) -> tuple[Any, Any]:
    """The benchmark gateway's ASGI app and settings: ``instant`` (InstantBackend answering "4" with
    ``model``'s tokenizer) or ``local`` (the embedded engine on ``model``)."""
    from agentr1.core.models import resolve_model
    from agentr1.core.rendering import load_renderer
    from agentr1.engine import EngineOptions
    from agentr1.gateway.app import create_app
    from agentr1.gateway.backends.instant import InstantBackend
    from agentr1.gateway.settings import GatewaySettings, WriteSettings

    settings = GatewaySettings(model=model, db=db, accept_any_model=True, write=WriteSettings(durable=durable),
                               engine=EngineOptions(device="cpu"))
    backend = renderer = None
    if kind == "instant":
        renderer = load_renderer(resolve_model(model))
        backend = InstantBackend(renderer.tokenizer, "4", model_name="bench")
    return create_app(settings, backend=backend, renderer=renderer), settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=["instant", "local", "floor"], default="instant")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--db", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fast-writes", action="store_true")
    args = parser.parse_args()

    import uvicorn

    from agentr1.gateway.server import uvicorn_options

    if args.kind == "floor":
        uvicorn.run(floor_app(args.port), host="127.0.0.1", port=args.port, **uvicorn_options())
        return
    app, settings = gateway_app(args.kind, args.model, args.db, durable=not args.fast_writes)
    uvicorn.run(app, host="127.0.0.1", port=args.port, **uvicorn_options(settings))


if __name__ == "__main__":
    main()
