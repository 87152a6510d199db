"""Start a real gateway (uvicorn on loopback) for a test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentr1.gateway.app import create_app
from agentr1.gateway.server import BackgroundServer
from agentr1.gateway.settings import GatewaySettings
from agentr1.store import TraceStore


@contextmanager
def serve(db: str | Path, *, backend: Any = None, renderer: Any = None, model: str = "tiny",
          **settings: Any) -> Iterator[tuple[str, TraceStore]]:
    """Yield (gateway url, an open store on the same database)."""
    store = TraceStore.open(str(db))
    app = create_app(GatewaySettings(model=model, db=str(db), **settings), store=store, backend=backend,
                     renderer=renderer)
    try:
        with BackgroundServer(app) as url:
            yield url, store
    finally:
        store.close()


@contextmanager
def serve_instant(db: str | Path, model_dir: str | Path, reply: Any = "The answer is 84.",
                  **settings: Any) -> Iterator[tuple[str, TraceStore]]:
    """:func:`serve` with an instant backend answering ``reply`` through the real tokenizer and renderer of the
    model at ``model_dir``, served as ``policy`` under any model name (context 2,048)."""
    from agentr1.core.rendering import load_renderer
    from agentr1.gateway.backends.instant import InstantBackend

    renderer = load_renderer(model_dir)
    backend = InstantBackend(renderer.tokenizer, reply, model_name="policy", max_context=2048)
    with serve(db, backend=backend, renderer=renderer, accept_any_model=True, **settings) as served:
        yield served
