"""A real gateway (uvicorn, instant backend with SmolLM2's real tokenizer and renderer) for SDK tests."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from agentr1.gateway.app import create_app
    from agentr1.gateway.backends.instant import InstantBackend
    from agentr1.gateway.models import ensure_smollm2
    from agentr1.gateway.rendering import load_renderer
    from agentr1.gateway.server import BackgroundServer
    from agentr1.gateway.settings import GatewaySettings
    from agentr1.sdk import configure
    from agentr1.store import TraceStore

    renderer = load_renderer(ensure_smollm2())

    def reply(prompt_ids: list[int]) -> str:  # echo the last user line, so tests can see what was sent
        text = renderer.tokenizer.decode(prompt_ids)
        last_user = text.rsplit("<|im_start|>user\n", 1)[-1].split("<|im_end|>", 1)[0]
        return f"echo: {last_user}"

    db = tmp_path_factory.mktemp("sdk") / "sdk.db"
    store = TraceStore.open(str(db))
    backend = InstantBackend(renderer.tokenizer, reply, model_name="policy")
    app = create_app(GatewaySettings(db=str(db), accept_any_model=True), store=store, backend=backend,
                     renderer=renderer)
    with BackgroundServer(app) as url:
        configure(url)
        yield url, store
    store.close()
