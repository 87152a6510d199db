"""More gateway processes in front of one embedded engine: :class:`GatewayShards`.

A gateway serves every call on one event loop: parsing the request, rendering and tokenizing the prompt,
recording the step, answering. On the H200's host that is about 1 ms of CPU a chat call, and in a rollout of
128 one-call sessions the last call reached the engine 0.15-0.18 s after the first, the engine waiting on the
loop (docs/benchmarks.md, the rollout rows). Shards split that work over processes: each is a whole
gateway (the same settings and store, its own event loop and session registry) whose backend is a
``LocalBackend(engine_address=...)`` sending its rows to the engine process that the main gateway's backend
started. A session lives in one shard: it is opened there (``POST /sessions`` to that shard's URL), its calls go
to the ``base_url`` that shard answered, and it is ended there. ``agentr1 train`` spreads its rollout sessions over
the shards (``actor_rollout_ref.rollout.gateway_processes``; ``agentr1.trainer.rollout.AgentRunner``).

The shards are spawned processes, each serving under uvicorn on a loopback port of its own with the gateway's
connection settings; :meth:`GatewayShards.stop` sends SIGTERM (uvicorn's graceful shutdown: requests in flight
are answered and the step writer flushes) and kills what has not stopped after ``stop_timeout_s``. Weights are
loaded through the main gateway's backend only; the engine tells every shard the new policy version before
that load returns.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from typing import Any

import httpx

from agentr1.core import freeze_heap
from agentr1.gateway.server import free_port
from agentr1.gateway.settings import GatewaySettings

__all__ = ["GatewayShards"]

log = logging.getLogger("agentr1.gateway.shards")


class GatewayShards:
    """``count`` gateway processes on ``settings``, their backend the engine process at ``engine_address`` (the
    main gateway's ``LocalBackend.engine_address``). :attr:`urls` once :meth:`start` returned."""

    def __init__(self, settings: GatewaySettings, engine_address: Any, count: int, *,
                 startup_timeout_s: float = 300.0, stop_timeout_s: float = 30.0) -> None:
        if count < 1:
            raise ValueError(f"a gateway needs at least one process, not {count}")
        if engine_address is None:
            raise ValueError("gateway shards share an engine process: start the local backend with "
                             "engine_process=True first")
        self.settings, self.engine_address, self.count = settings, engine_address, count
        self.startup_timeout_s, self.stop_timeout_s = startup_timeout_s, stop_timeout_s
        self.processes: list[Any] = []
        self.urls: list[str] = []

    def start(self) -> GatewayShards:
        """Spawn the processes and return once each answers ``/ready``; on failure, stop them all and raise."""
        context = multiprocessing.get_context("spawn")
        values = self.settings.model_dump()
        try:
            for k in range(self.count):
                port = free_port()
                process = context.Process(target=serve_shard, args=(values, self.engine_address, port),
                                          name=f"agentr1-gateway-shard-{k}", daemon=True)
                process.start()
                self.processes.append(process)
                self.urls.append(f"http://127.0.0.1:{port}")
            deadline = time.monotonic() + self.startup_timeout_s
            for process, url in zip(self.processes, self.urls, strict=True):
                _wait_ready(process, url, deadline)
        except BaseException:
            self.stop()
            raise
        log.info("gateway shards: %d processes at %s", self.count, ", ".join(self.urls))
        return self

    def stop(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.terminate()  # SIGTERM: uvicorn's graceful shutdown
        deadline = time.monotonic() + self.stop_timeout_s
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.warning("gateway shard %s did not stop within %.0f s: killed", process.name, self.stop_timeout_s)
                process.kill()
                process.join(5)
        self.processes, self.urls = [], []

    def __enter__(self) -> GatewayShards:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _wait_ready(process: Any, url: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        if not process.is_alive():
            raise RuntimeError(f"gateway shard {process.name} exited with code {process.exitcode} during startup; "
                               "see its log above")
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"gateway shard {process.name} was not ready at {url} in time")


def _stop_with_parent() -> None:
    """Stop this shard (gracefully, as SIGTERM does) once the process that started it is gone, killed included: a
    gateway whose trainer and engine are gone serves nothing."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        parent.join()
        os.kill(os.getpid(), signal.SIGTERM)


def serve_shard(values: dict[str, Any], engine_address: Any, port: int) -> None:
    """A shard's main: the gateway app on ``values`` (GatewaySettings' fields) with a backend sharing the engine at
    ``engine_address``, under uvicorn on ``port`` until SIGTERM."""
    import uvicorn

    from agentr1.gateway.app import create_app
    from agentr1.gateway.backends import local_backend
    from agentr1.gateway.server import uvicorn_options

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    threading.Thread(target=_stop_with_parent, name="agentr1-shard-parent", daemon=True).start()
    settings = GatewaySettings(**values)
    backend = local_backend(settings, engine_address=engine_address)
    app = create_app(settings, backend=backend, owns_backend=True)
    freeze_heap()  # the imports: no full collection walks them mid-rollout
    config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on",
                            **uvicorn_options(settings))
    uvicorn.Server(config).run()
