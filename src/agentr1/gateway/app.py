"""The gateway application: `create_app(settings, *, store=None, backend=None)`.

To serve it in this process (a trainer, an evaluation, a notebook), use
:class:`agentr1.gateway.EmbeddedGateway`; `agentr1 gateway` runs it under uvicorn."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentr1.core import OpenMPReleasingExecutor, is_vlm_dir, resolve_model
from agentr1.gateway.auth import KeyConcurrencyLimit
from agentr1.gateway.backends.base import Backend, check_backend
from agentr1.gateway.backends.factory import build_backend
from agentr1.gateway.context import ContextPolicies, Summarizer, backend_summarizer, build_policy
from agentr1.gateway.errors import UnhandledErrors, error_payload, install_error_handlers
from agentr1.gateway.gateway import Gateway
from agentr1.gateway.metrics import Metrics
from agentr1.gateway.routes import admin, health, openai, sessions
from agentr1.gateway.sessions import SessionRegistry
from agentr1.gateway.settings import GatewaySettings
from agentr1.gateway.writer import StepWriter
from agentr1.store import TraceStore

log = logging.getLogger("agentr1.gateway")


def _default_renderer(settings: GatewaySettings, backend: Backend, store: TraceStore) -> Any:
    # lazy: rendering loads the tokenizers' stack; `import agentr1.gateway` stays light without it
    from agentr1.core.rendering import ImagePolicy, load_renderer, load_vision_renderer

    tokenizer = backend.tokenizer
    if tokenizer is None and not backend.trainable:  # an external model (litellm): nothing to render
        return None
    model = Path(settings.model).expanduser()
    if is_vlm_dir(model):  # a vision-language model (a local directory): its processor renders the images
        policy = ImagePolicy(max_bytes=settings.image.max_bytes, max_pixels=settings.image.max_pixels,
                             max_images=settings.image.max_count, allow_remote=settings.image.allow_remote,
                             local_dirs=tuple(Path(d) for d in settings.image.local_dirs))
        return load_vision_renderer(model, policy=policy, resolve_ref=store.images.get,
                                    tool_call_parser=settings.tool_call_parser)
    return load_renderer(tokenizer if tokenizer is not None else resolve_model(settings.model),
                         tool_call_parser=settings.tool_call_parser)


def create_app(
    settings: GatewaySettings | None = None,
    *,
    store: TraceStore | None = None,
    backend: Backend | None = None,
    renderer: Any = None,
    summarizer: Summarizer | None = None,
    owns_backend: bool | None = None,
) -> FastAPI:
    """``backend``: default :func:`~agentr1.gateway.backends.build_backend` of ``settings``. The app
    starts the backend on its event loop and, when it owns it (``owns_backend``; default: it built
    it), closes it there on shutdown. ``summarizer`` (``async (messages) -> str``) writes the
    ``summary`` context policy's summaries; default: the gateway's own backend
    (:func:`agentr1.gateway.context.backend_summarizer`). A ``backend`` that does not keep to what it declares it can
    do (:func:`~agentr1.gateway.backends.base.check_backend`) is refused here (TypeError)."""
    settings = settings or GatewaySettings()
    if backend is not None:
        check_backend(backend)
    build_policy(settings.context_policy)  # a bad --context-policy fails here, before a model loads
    if settings.tool_call_parser is not None:  # so does a bad --tool-call-parser
        from agentr1.core.rendering import get_tool_call_parser  # lazy: the rendering stack

        get_tool_call_parser(settings.tool_call_parser)
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own_store = store is None
        # the engine's start and weight loads run on this loop's executor: its threads must not keep OpenMP pools
        # beside the engine's (agentr1.core.openmp)
        asyncio.get_running_loop().set_default_executor(OpenMPReleasingExecutor())
        trace_store = store or TraceStore.open(settings.db, migrate=True, image_dir=settings.image.dir)
        model_backend = backend or build_backend(settings)
        await model_backend.start()
        writer = StepWriter(trace_store, batch_size=settings.write.batch_size,
                            interval_s=settings.write.interval_ms / 1000)
        await writer.start()
        if renderer is not None and settings.tool_call_parser is not None:
            from agentr1.core.rendering import use_tool_call_parser  # lazy, as above

            use_tool_call_parser(renderer, settings.tool_call_parser)
        app.state.gateway = Gateway(
            settings=settings, backend=model_backend,
            renderer=renderer or _default_renderer(settings, model_backend, trace_store),
            sessions=SessionRegistry(trace_store, auto_session=settings.auto_session,
                                     default_run=settings.default_run),
            writer=writer, metrics=metrics,
        )
        gw = app.state.gateway
        if gw.renderer is not None:  # external models (no renderer) see the messages as sent
            gw.context = ContextPolicies(settings.context_policy, tokenizer=gw.renderer.tokenizer,
                                         summarizer=summarizer,
                                         make_summarizer=lambda max_tokens: backend_summarizer(gw, max_tokens))
        log.info("gateway ready: model %s on %s backend, store %s", model_backend.model_name, model_backend.name,
                 trace_store.engine.url.render_as_string(hide_password=True))
        sweeper = asyncio.create_task(abandon_idle_sessions(trace_store, settings.abandon_idle_s)) \
            if settings.abandon_idle_s > 0 else None
        try:
            yield
        finally:
            if sweeper is not None:
                sweeper.cancel()
            await writer.close()
            if owns_backend or (owns_backend is None and backend is None):
                await model_backend.close()
            if own_store:
                trace_store.close()

    app = FastAPI(title="agentr1 gateway", version="0.1.0", lifespan=lifespan)
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(openai.router, prefix="/v1", tags=["openai"])
    app.include_router(openai.router, prefix="/sessions/{session_id}/v1", tags=["openai (session in path)"])
    app.include_router(sessions.router)
    app.include_router(admin.router)
    if settings.auth.max_concurrent_per_key > 0:
        app.add_middleware(KeyConcurrencyLimit, limit=settings.auth.max_concurrent_per_key)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, metrics=metrics)
    app.add_middleware(UnhandledErrors)  # the last added: the outermost of ours, around the limits too
    return app


async def abandon_idle_sessions(store: TraceStore, idle_s: float) -> None:
    """Every ``idle_s / 2`` (at most a minute), mark sessions idle for ``idle_s`` as abandoned: after a crash
    of the agent or of a gateway (SIGKILL leaves its sessions running) the trace says they are incomplete."""
    while True:
        await asyncio.sleep(min(60.0, idle_s / 2))
        cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=idle_s)
        try:
            if n := await asyncio.to_thread(store.abandon_stale, cutoff):
                log.info("marked %d sessions idle for %.0f s as abandoned", n, idle_s)
        except Exception as exc:  # the database may be down for a while: try again next round
            log.warning("could not mark idle sessions as abandoned: %s", exc)


class BodyLimitMiddleware:
    """Refuse bodies over ``max_bytes`` with 413 before reading them whole; count requests in flight."""

    def __init__(self, app: ASGIApp, max_bytes: int, metrics: Metrics) -> None:
        self.app, self.max_bytes, self.metrics = app, max_bytes, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _send_413(send, self.max_bytes, scope["path"])
            return
        received, too_large = 0, False

        async def limited_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    too_large = True
                    raise _BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            # A body without Content-Length that grows too large fails inside FastAPI's body parsing,
            # which answers its own 400 "error parsing the body": drop that, the 413 below says why.
            if not too_large:
                await send(message)

        self.metrics.in_flight += 1
        try:
            await self.app(scope, limited_receive, guarded_send)
        except _BodyTooLarge:
            pass
        finally:
            self.metrics.in_flight -= 1
        if too_large:
            await _send_413(send, self.max_bytes, scope["path"])


class _BodyTooLarge(Exception):
    pass


async def _send_413(send: Send, max_bytes: int, path: str) -> None:
    import json

    body = json.dumps(error_payload(413, f"request body is larger than {max_bytes} bytes", path,
                                   code="request_too_large")).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
