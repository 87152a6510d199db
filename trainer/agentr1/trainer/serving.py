"""Where a training job's rollouts are served: the gateway in front of the backend that
``actor_rollout_ref.rollout.name`` selects (verl's name for it).

- ``local``: the embedded engine in this process (:class:`~agentr1.gateway.backends.local.LocalBackend`);
  weights move to it as tensors.
- ``sglang`` / ``vllm``: the gateway's remote backend (:func:`~agentr1.gateway.backends.factory.
  remote_backend`, the one ``agentr1 gateway --backend`` uses: health checks, retries, failover,
  sticky routing) over ``rollout.urls``, or over SGLang servers this job starts and supervises
  (``rollout.launch``: :class:`~agentr1.gateway.backends.launcher.SGLangLauncher`, as
  ``agentr1 gateway --launch``). Weights move as a HF directory the servers load from disk
  (:meth:`~agentr1.trainer.engine.policy.LocalPolicyEngine.sync_to`).

Policy versions. The version recorded on every step is the one the backend reports for that
answer (SGLang's ``weight_version``; vLLM reports none, so the backend's own counter), and the
trainer takes its ``policy_version`` from what the backend returns after each sync, so the two
cannot drift. Servers that report another version than the trainer's at setup (a resumed run, or
servers still holding an earlier run's weights) first get the trainer's current weights.

Event loops. The gateway runs under uvicorn on its own thread and event loop; a remote backend's
HTTP client and its pause gate belong to that loop, while the trainer's loop is another one. So
``update_weights(path)`` is submitted to the gateway's loop (:class:`_OnGatewayLoop`), and the
directory is written from the trainer's side, which never blocks the gateway while it saves.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentr1.store import TraceStore
from agentr1.trainer.config import JobConfig

__all__ = ["Serving", "start_serving"]

log = logging.getLogger("agentr1.trainer.serving")


class _OnGatewayLoop:
    """A remote backend's ``update_weights`` run on the gateway's event loop, awaitable from any other
    loop. It has no ``update_weights_from_tensors``, so the engine syncs through a directory."""

    def __init__(self, backend: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.backend, self.loop = backend, loop

    async def update_weights(self, path: str) -> int:
        future = asyncio.run_coroutine_threadsafe(self.backend.update_weights(path), self.loop)
        return int(await asyncio.wrap_future(future))


@dataclass
class Serving:
    """The running gateway (``url``), its backend and, with ``launch``, the SGLang servers it started."""

    backend: Any
    server: Any  # agentr1.gateway.server.BackgroundServer
    url: str
    launcher: Any = None  # agentr1.gateway.backends.launcher.SGLangLauncher

    @property
    def remote(self) -> bool:
        return not hasattr(self.backend, "update_weights_from_tensors")

    @property
    def policy_version(self) -> int:
        return int(self.backend.policy_version)

    async def sync(self, engine: Any) -> int:
        """The engine's current policy to the servers; returns the policy version they report now."""
        if self.launcher is not None and self.launcher.error is not None:
            raise RuntimeError(f"the SGLang servers this job launched are gone: {self.launcher.error}")
        if not self.remote:
            return int(await engine.sync_to(self.backend))
        return int(await engine.sync_to(_OnGatewayLoop(self.backend, _event_loop_of(self.server))))

    async def align(self, engine: Any, policy_version: int) -> int:
        """At setup: if the servers report another version than the trainer's ``policy_version``, load
        the engine's weights into them. Returns the version to record from now on."""
        if self.policy_version == policy_version:
            return policy_version
        log.warning("the %s servers report policy version %d, the trainer %d: loading the trainer's weights "
                    "into them; versions continue from what they report", self.backend.name, self.policy_version,
                    policy_version)
        return await self.sync(engine)

    def close(self) -> None:
        self.server.stop()
        if not self.remote:  # a remote backend belongs to the gateway app, which closed it on its loop
            asyncio.run(self.backend.close())
        if self.launcher is not None:
            self.launcher.stop()


def _event_loop_of(server: Any) -> asyncio.AbstractEventLoop:
    """The event loop of a running ``BackgroundServer`` (its uvicorn server's listening sockets)."""
    sockets = getattr(server.server, "servers", None)
    if not sockets:
        raise RuntimeError("the gateway is not running: no event loop to update the weights on")
    return sockets[0].get_loop()


def start_serving(cfg: JobConfig, store: TraceStore, model_path: Path, serve_from: Path, *, run_id: str,
                  policy_version: int, log_dir: Path) -> Serving:
    """Start the backend ``cfg.actor_rollout_ref.rollout`` selects (launching SGLang servers first when
    asked) behind a gateway on a free loopback port. ``serve_from``: the weights the embedded engine
    loads (launched servers start from ``model_path``; :meth:`Serving.align` brings them up to date)."""
    from agentr1.gateway import BackgroundServer, GatewaySettings, create_app

    rollout = cfg.actor_rollout_ref.rollout
    settings = GatewaySettings(db=cfg.db, accept_any_model=True, default_run=run_id, model=str(model_path),
                               backend=rollout.name, backend_urls=list(rollout.urls))
    if rollout.name == "local":
        from agentr1.gateway.backends import LocalBackend

        # one decode batch can hold every concurrent rollout (a GPU's throughput grows with the batch)
        backend = LocalBackend(serve_from, device=cfg.trainer.device, model_name="policy",
                               policy_version=policy_version, max_batch_size=max(32, rollout.max_concurrency))
        server = BackgroundServer(create_app(settings, store=store, backend=backend))
        return Serving(backend, server, server.start())
    launcher = _launch(cfg, model_path, log_dir) if rollout.launch else None
    try:
        if launcher is not None:
            settings.backend_urls = launcher.urls
        app = create_app(settings, store=store)  # the app builds, starts and closes the remote backend
        server = BackgroundServer(app)
        url = server.start()
    except BaseException:
        if launcher is not None:
            launcher.stop()
        raise
    return Serving(app.state.gateway.backend, server, url, launcher)


def _launch(cfg: JobConfig, model_path: Path, log_dir: Path) -> Any:
    from agentr1.gateway.backends import LaunchSpec, SGLangLauncher, parse_command

    rollout = cfg.actor_rollout_ref.rollout
    command = (tuple(rollout.launch_command) if rollout.launch_command
               else parse_command(os.environ.get("AGENTR1_SGLANG_LAUNCH_COMMAND")))
    spec = LaunchSpec(model_path=str(model_path), servers=rollout.launch_servers, base_port=rollout.launch_port,
                      extra_args=list(rollout.launch_args), command=command, log_dir=str(log_dir),
                      startup_timeout_s=rollout.launch_timeout_s)
    launcher = SGLangLauncher(spec)  # gives up after repeated crashes: Serving.sync then stops the job
    launcher.start()
    atexit.register(launcher.stop)  # servers run in their own sessions: never leave them behind a failed job
    return launcher
