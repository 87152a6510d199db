"""The viewer application: `create_viewer_app(settings, *, store=None, advantages=None)`.

Pages at ``/``, ``/runs/{id}``, ``/sessions/{id}``, ``/groups/{id}``, ``/chat``; the JSON API they
use under ``/api``; ``/metrics`` with the trainer's metrics in Prometheus text. Reads the trace
store, never writes it (the chat page writes through the gateway, like any agent).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from agentr1.gateway import install_error_handlers
from agentr1.store import TraceStore
from agentr1.viewer.groups import AdvantageSource
from agentr1.viewer.routes import chat, groups, images, pages, runs, sessions
from agentr1.viewer.runs_dir import RunsDir
from agentr1.viewer.settings import ViewerSettings
from agentr1.viewer.state import ViewerState
from agentr1.viewer.tokens import Tokenizers

log = logging.getLogger("agentr1.viewer")


def create_viewer_app(settings: ViewerSettings | None = None, *, store: TraceStore | None = None,
                      advantages: AdvantageSource | None = None) -> FastAPI:
    """The app over ``store`` (default: ``settings.db``, opened on start); ``advantages``: what computes a task
    group's advantages (``agentr1 view`` hands it the trainer's ``GroupAdvantages``; None: the group pages show rewards
    only)."""
    settings = settings or ViewerSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        trace_store = store or TraceStore.open(settings.db, migrate=False)
        http = httpx.Client(timeout=httpx.Timeout(600.0, connect=10.0))
        app.state.viewer = ViewerState(settings=settings, store=trace_store, tokenizers=Tokenizers(settings.tokenizer),
                                       runs=RunsDir(settings.runs_dir), http=http, advantages=advantages)
        log.info("viewer ready: store %s, runs dir %s", trace_store.engine.url.render_as_string(hide_password=True),
                 settings.runs_dir or "-")
        try:
            yield
        finally:
            http.close()
            if store is None:
                trace_store.close()

    app = FastAPI(title="agentr1 viewer", version="0.1.0", lifespan=lifespan)
    install_error_handlers(app)
    for router in (runs.router, sessions.router, groups.router, chat.router, images.router, pages.api):
        app.include_router(router, prefix="/api")
    app.include_router(pages.pages)
    app.mount("/static", StaticFiles(directory=pages.STATIC), name="static")
    return app
