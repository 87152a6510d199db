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

import httpx


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=["instant", "local"], default="instant")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--db", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fast-writes", action="store_true")
    args = parser.parse_args()

    import uvicorn

    from agentr1.gateway.app import create_app
    from agentr1.gateway.backends.instant import InstantBackend
    from agentr1.gateway.models import resolve_model
    from agentr1.gateway.rendering import load_renderer
    from agentr1.gateway.settings import GatewaySettings

    settings = GatewaySettings(model=args.model, db=args.db, accept_any_model=True, durable_writes=not args.fast_writes,
                               device="cpu")
    backend = renderer = None
    if args.kind == "instant":
        renderer = load_renderer(resolve_model(args.model))
        backend = InstantBackend(renderer.tokenizer, "4", model_name="bench")
    app = create_app(settings, backend=backend, renderer=renderer)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
