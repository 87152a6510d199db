"""A gateway in this process: :class:`EmbeddedGateway`, the one way other parts serve one.

The trainer's rollouts, ``agentr1 eval`` and the SFT demonstration replay each need a real gateway
(the agent talks to it over HTTP with its own client) backed by a backend this process holds. This
is that gateway: ``settings`` (:class:`~agentr1.gateway.GatewaySettings`, the same model as
``agentr1 gateway``'s flags) select the backend through :func:`~agentr1.gateway.backends.build_backend`
unless one is given, ``settings.launch.enabled`` first starts and supervises SGLang servers
(:func:`~agentr1.gateway.backends.launch_servers`), and the app runs under uvicorn on a free
loopback port in a background thread (:class:`~agentr1.gateway.BackgroundServer`)::

    with EmbeddedGateway(GatewaySettings(db=db, default_run=run_id)) as gateway:
        configure(gateway.url)  # agentr1.sdk: the agents' base URL
        ...

Event loops: the gateway runs on its own loop (uvicorn's thread). A backend built here is started
and closed on that loop; :meth:`EmbeddedGateway.run_on_loop` runs a coroutine there (a remote
backend's HTTP client belongs to it) and can be awaited from any other loop.
"""

from __future__ import annotations

import asyncio
import atexit
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

from fastapi import FastAPI

from agentr1.gateway.app import create_app
from agentr1.gateway.backends.base import Backend, BackendAbilities, check_backend
from agentr1.gateway.backends.factory import build_backend
from agentr1.gateway.backends.launcher import SGLangLauncher, launch_servers
from agentr1.gateway.server import BackgroundServer
from agentr1.gateway.settings import GatewaySettings
from agentr1.store import TraceStore

__all__ = ["EmbeddedGateway"]

T = TypeVar("T")


class EmbeddedGateway:
    """A gateway served from this process until :meth:`stop` (or the end of a ``with`` block).

    ``store``: an open trace store to write to (default: the app opens ``settings.db``).
    ``backend``: a backend this process built itself (a scripted one, a shared engine); by default
    the one ``settings`` select, serving ``policy_version`` until weights arrive, and owned by the
    gateway (closed when it stops; ``owns_backend`` overrides). ``renderer``: default the model's.
    """

    def __init__(self, settings: GatewaySettings | None = None, *, store: TraceStore | None = None,
                 backend: Backend | None = None, renderer: Any = None, policy_version: int = 0,
                 owns_backend: bool | None = None, port: int | None = None,
                 startup_timeout_s: float = 300.0) -> None:
        self.settings = settings or GatewaySettings()
        self.store = store
        self.backend: Backend | None = backend
        self.abilities = BackendAbilities()  # the backend's optional operations, typed (check_backend), once started
        self.renderer = renderer
        self.policy_version = policy_version
        self.owns_backend = backend is None if owns_backend is None else owns_backend
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.launcher: SGLangLauncher | None = None  # the SGLang servers settings.launch started
        self.app: FastAPI | None = None
        self.server: BackgroundServer | None = None
        self.url = ""

    def start(self) -> EmbeddedGateway:
        """Launch the servers (``settings.launch.enabled``), build the backend, serve; returns ``self`` once the
        gateway answers ``/ready``. On failure, what was started is stopped again."""
        settings = self.settings
        try:
            if settings.launch.enabled:
                self.launcher = launch_servers(settings)
                atexit.register(self.launcher.stop)  # servers run in their own sessions: never leave them behind
                settings = self.settings = settings.model_copy(update={"backend_urls": self.launcher.urls})
            if self.backend is None:
                self.backend = build_backend(settings, policy_version=self.policy_version)
            self.abilities = check_backend(self.backend)
            self.app = create_app(settings, store=self.store, backend=self.backend, renderer=self.renderer,
                                  owns_backend=self.owns_backend)
            self.server = BackgroundServer(self.app, port=self.port, startup_timeout_s=self.startup_timeout_s,
                                           keep_alive_s=settings.keep_alive_s)
            self.url = self.server.start()
        except BaseException:
            self._stop_launcher()
            raise
        return self

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The gateway's event loop (its uvicorn server's listening sockets')."""
        sockets = getattr(self.server.server, "servers", None) if self.server is not None else None
        if not sockets:
            raise RuntimeError("the gateway is not running: it has no event loop")
        return sockets[0].get_loop()

    async def run_on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the gateway's event loop and wait for it from the caller's loop."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return await asyncio.wrap_future(future)

    def stop(self) -> None:
        """Stop serving (an owned backend is closed on the gateway's loop), then stop launched servers."""
        try:
            if self.server is not None:
                self.server.stop()
        finally:
            self._stop_launcher()

    def _stop_launcher(self) -> None:
        if self.launcher is not None:
            self.launcher.stop()
            atexit.unregister(self.launcher.stop)

    def __enter__(self) -> EmbeddedGateway:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
