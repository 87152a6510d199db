"""The embedded gateway (``agentr1.gateway.EmbeddedGateway``) and the one backend factory
(``agentr1.gateway.backends.build_backend``): what the trainer, `agentr1 eval` and the SFT replay use."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from agentr1.core import resolve_model
from agentr1.core.rendering import load_renderer
from agentr1.engine import EngineOptions
from agentr1.gateway import EmbeddedGateway, GatewaySettings
from agentr1.gateway.backends import LiteLLMBackend, LocalBackend, SGLangBackend, VLLMBackend, build_backend
from agentr1.gateway.backends.instant import InstantBackend
from agentr1.store import TraceStore


class _Counted(InstantBackend):
    closed = 0

    async def close(self) -> None:
        type(self).closed += 1
        await super().close()


@pytest.mark.parametrize("owns", [False, True])
def test_embedded_gateway_serves_records_and_closes_only_what_it_owns(tmp_path, owns):
    renderer = load_renderer(resolve_model("tiny"))
    backend = _Counted(renderer.tokenizer, "4", model_name="policy")
    _Counted.closed = 0
    db = f"sqlite:///{tmp_path / 'e.db'}"
    settings = GatewaySettings(db=db, accept_any_model=True, default_run="embedded")
    with EmbeddedGateway(settings, backend=backend, renderer=renderer, owns_backend=owns) as gateway:
        answer = httpx.post(f"{gateway.url}/v1/chat/completions", timeout=30,
                            json={"model": "x", "messages": [{"role": "user", "content": "2+2?"}]})
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] == "4"
        # a coroutine run on the gateway's own loop, awaited from another one
        assert asyncio.run(gateway.run_on_loop(_loop_id())) == id(gateway.loop)
    assert _Counted.closed == int(owns)
    with TraceStore.open(db) as store:
        (session,) = store.list_sessions(run_id="embedded")
        assert store.get_session(session.id).steps[0].action["content"] == "4"


async def _loop_id() -> int:
    return id(asyncio.get_running_loop())


def test_a_failed_start_raises_and_leaves_nothing_running(tmp_path):
    settings = GatewaySettings(db=f"sqlite:///{tmp_path / 'e.db'}", backend="vllm")  # no server addresses
    gateway = EmbeddedGateway(settings)
    with pytest.raises(ValueError, match="needs the servers' addresses"):
        gateway.start()
    assert gateway.server is None and gateway.url == ""


def test_build_backend_selects_by_settings(tiny_model_path):
    local = build_backend(GatewaySettings(model=str(tiny_model_path), served_model_name="policy",
                                          engine=EngineOptions(device="cpu", max_batch_size=3)), policy_version=7)
    assert isinstance(local, LocalBackend) and local.policy_version == 7 and local.model_name == "policy"
    urls = ["http://127.0.0.1:1"]
    assert isinstance(build_backend(GatewaySettings(model=str(tiny_model_path), backend="sglang", backend_urls=urls)),
                      SGLangBackend)
    assert isinstance(build_backend(GatewaySettings(model=str(tiny_model_path), backend="vllm", backend_urls=urls)),
                      VLLMBackend)
    assert isinstance(build_backend(GatewaySettings(model="openai/gpt-4o-mini", backend="litellm")), LiteLLMBackend)
    with pytest.raises(ValueError, match="needs the servers' addresses"):
        build_backend(GatewaySettings(backend="sglang"))
