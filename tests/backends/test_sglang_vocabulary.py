"""Prompt ids outside the served vocabulary never reach SGLang: an id past it killed a real SGLang 0.5.17 (recorded
2026-12-07: no answer, then connection refused), so SGLangBackend refuses such prompts with a 400 before sending
them, and the gateway answers that 400 in the API's own shape. Against the fake server (which answers such an id
with a 500 and lives on)."""

from __future__ import annotations

import json

import fake_sglang
import httpx
import pytest
from backend_helpers import collect, request, run, served, using

from agentr1.core.generation import BackendError
from agentr1.gateway.app import create_app
from agentr1.gateway.backends.sglang import SGLangBackend, served_vocabulary
from agentr1.gateway.server import BackgroundServer
from agentr1.gateway.settings import GatewaySettings


@pytest.fixture(scope="module")
def server(engine, tiny_model_path):
    """A fake SGLang server on the shared engine: (url, its state)."""
    app = fake_sglang.create_app(engine, model_path=tiny_model_path, served_model_name="policy")
    with served(app) as url:
        yield url, app.state.fake


def test_ids_outside_the_vocabulary_are_refused_before_sending(server, prompts, engine, tiny_model_path):
    url, fake = server
    fake.requests.clear()
    vocab = engine.engine.vocab_size

    async def body(b: SGLangBackend):
        assert b.vocab_size == vocab  # from the model directory's config.json
        for bad, position in (([*prompts[0], vocab], len(prompts[0])), ([-1, *prompts[0]], 0)):
            with pytest.raises(BackendError, match=f"position {position}") as whole:
                await b.generate(request(bad))
            with pytest.raises(BackendError) as streamed:
                await collect(b.stream(request(bad)))
            assert whole.value.status_code == streamed.value.status_code == 400
            assert f"outside the served model's vocabulary [0, {vocab})" in str(whole.value)
        assert not fake.requests and all(s.up for s in b.pool.servers)  # nothing sent, nothing marked down
        edge = [*prompts[0], vocab - 1]  # the vocabulary's last id is fine
        assert (await b.generate(request(edge, max_new_tokens=2))).output_ids
        assert len(fake.requests) == 1

    run(using(SGLangBackend(url, tokenizer=str(tiny_model_path)), body))


def test_the_served_vocabulary_comes_from_the_model_config_or_the_tokenizer(tmp_path, tiny_model_path, engine):
    """config.json's vocab_size (a vision-language model's text_config's), else the tokenizer's length, else
    unknown (prompts then go unchecked); an explicit vocab_size wins."""
    assert served_vocabulary(str(tiny_model_path)) == engine.engine.vocab_size
    vlm = tmp_path / "vlm"
    vlm.mkdir()
    (vlm / "config.json").write_text(json.dumps({"vocab_size": 7, "text_config": {"vocab_size": 151936}}))
    assert served_vocabulary(str(vlm)) == 151936
    tokenizer = engine.engine.tokenizer
    assert served_vocabulary(tokenizer) == engine.engine.vocab_size  # its directory's config
    tokenizer_only = type("Tokenizer", (), {"__len__": lambda self: 321, "name_or_path": str(tmp_path / "none")})()
    assert served_vocabulary(tokenizer_only) == 321
    assert served_vocabulary(None) is None and served_vocabulary(str(tmp_path / "none")) is None
    assert SGLangBackend("http://127.0.0.1:1", tokenizer=str(vlm), vocab_size=100).vocab_size == 100
    assert SGLangBackend("http://127.0.0.1:1").vocab_size is None


@pytest.mark.parametrize("route", ["completions", "messages"])
def test_the_gateway_answers_the_refusal_with_a_400_in_the_apis_shape(route, server, tiny_model_path, tmp_path):
    """A tokenizer longer than the served model's vocabulary (here: vocab_size 100): the gateway's own checks pass,
    the backend refuses, and the client gets a 400 in its API's error shape; SGLang gets nothing."""
    url, fake = server
    fake.requests.clear()
    backend = SGLangBackend(url, tokenizer=str(tiny_model_path), vocab_size=100)
    with BackgroundServer(create_app(GatewaySettings(db=str(tmp_path / "v.db")), backend=backend)) as gateway:
        if route == "completions":
            answer = httpx.post(f"{gateway}/v1/completions", json={"model": "policy", "prompt": [1, 150, 2],
                                                                    "max_tokens": 2}, timeout=60)
            error = answer.json()["error"]
            assert (error["type"], error["code"]) == ("invalid_request_error", "backend_error")
        else:
            answer = httpx.post(f"{gateway}/v1/messages", json={"model": "policy", "max_tokens": 2, "messages": [
                {"role": "user", "content": "What is 12*7?"}]}, timeout=60)
            body = answer.json()
            assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
            error = body["error"]
        assert answer.status_code == 400 and "outside the served model's vocabulary [0, 100)" in error["message"]
    assert not fake.requests
