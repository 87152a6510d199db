"""Fixtures of the viewer tests: the recorded store and gateway, the viewer served by uvicorn on
loopback, and headless Chromium (the system's, driven by Playwright)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from viewer_harness import (
    Recorded,
    record_traces,
    scripted_reply,
    varied_logprobs,
    write_trainer_output,
)

from agentr1.viewer import CHROMIUM, CHROMIUM_ARGS

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Any:
    from agentr1.core.rendering import load_renderer
    from agentr1.gateway.app import create_app
    from agentr1.gateway.backends.instant import InstantBackend
    from agentr1.gateway.server import BackgroundServer
    from agentr1.gateway.settings import GatewaySettings
    from agentr1.store import TraceStore

    renderer = load_renderer(smollm2_path)
    root = tmp_path_factory.mktemp("viewer")
    db = f"sqlite:///{root / 'traces.db'}"
    store = TraceStore.open(db)
    backend = varied_logprobs(InstantBackend)(renderer.tokenizer, scripted_reply(renderer.tokenizer),
                                               model_name="policy")
    app = create_app(GatewaySettings(db=db, accept_any_model=True), store=store, backend=backend, renderer=renderer)
    runs_dir = root / "out"
    runs_dir.mkdir()
    with BackgroundServer(app) as url:
        rec = Recorded(gateway_url=url, db=db, store=store, backend=backend, tokenizer=renderer.tokenizer,
                       tokenizer_path=smollm2_path, runs_dir=runs_dir)
        record_traces(rec)
        write_trainer_output(runs_dir)
        yield rec
    store.close()


@pytest.fixture(scope="session")
def viewer_url(recorded: Recorded) -> Any:
    from agentr1.gateway.server import BackgroundServer
    from agentr1.trainer import GroupAdvantages
    from agentr1.viewer import ViewerSettings, create_viewer_app

    settings = ViewerSettings(db=recorded.db, runs_dir=str(recorded.runs_dir), tokenizer=str(recorded.tokenizer_path),
                              gateway_url=recorded.gateway_url)
    app = create_viewer_app(settings, advantages=GroupAdvantages())  # as `agentr1 view` makes it
    with BackgroundServer(app, ready_path="/api/health") as url:
        yield url


@pytest.fixture(scope="session")
def browser() -> Any:
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM}: the browser tests need it. Install it with "
                    "`apt-get install -y chromium` (scripts/setup does this as root) or set AGENTR1_CHROMIUM.")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the browser tests need Playwright: `pip install -e '.[dev]'` (uses the system Chromium)")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Any:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    yield tab
    context.close()


