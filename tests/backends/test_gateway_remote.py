"""The gateway end to end on a remote backend: ``create_app(settings, backend=SGLangBackend([...]))``
(or VLLMBackend) served by uvicorn, answering the real openai client, over a fake server that
speaks the remote protocol and samples with the real local engine. The stored steps must be exactly
what the engine samples for the stored prompt ids."""

from __future__ import annotations

import fake_sglang
import fake_vllm
import httpx
import openai
import pytest
from backend_helpers import request, run, served

from agentr1.core.generation import GenerateRequest, SamplingParams
from agentr1.gateway.app import create_app
from agentr1.gateway.backends.sglang import SGLangBackend
from agentr1.gateway.backends.vllm import VLLMBackend
from agentr1.gateway.server import BackgroundServer
from agentr1.gateway.settings import AuthSettings, GatewaySettings
from agentr1.store import TraceStore

KINDS = {"sglang": (fake_sglang, SGLangBackend), "vllm": (fake_vllm, VLLMBackend)}


@pytest.mark.parametrize("kind", KINDS)
def test_openai_client_through_the_gateway_records_exact_steps(kind, engine, tiny_model_path, tmp_path):
    fake, backend_class = KINDS[kind]
    remote = fake.create_app(engine, model_path=tiny_model_path, served_model_name="policy")
    store = TraceStore.open(str(tmp_path / "gw.db"))
    try:
        with served(remote) as url:
            backend = backend_class([url], tokenizer=str(tiny_model_path))
            app = create_app(GatewaySettings(db=str(tmp_path / "gw.db"), auth=AuthSettings(admin_key="admin")), store=store,
                             backend=backend)
            with BackgroundServer(app) as gateway:
                s = httpx.post(f"{gateway}/sessions", json={"task_id": "t1"}).json()
                client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
                messages = [{"role": "user", "content": "What is 12*7?"}]
                first = client.chat.completions.create(model="policy", messages=messages, max_tokens=8,
                                                       temperature=0, logprobs=True)
                messages += [first.choices[0].message.model_dump(exclude_none=True),
                             {"role": "user", "content": "Are you sure?"}]
                chunks = list(client.chat.completions.create(model="policy", messages=messages, max_tokens=8,
                                                              temperature=0, stream=True))
                update = httpx.post(f"{gateway}/admin/weights", json={"path": str(tiny_model_path)},
                                    headers={"Authorization": "Bearer admin"})
                assert update.status_code == 200 and update.json() == {"policy_version": 1}
                third = client.chat.completions.create(model="policy", max_tokens=4, temperature=0,
                                                       messages=[{"role": "user", "content": "hi"}])
                assert httpx.get(f"{gateway}/ready").json()["policy_version"] == 1
        steps = store.get_session(s["id"]).steps
        assert [st.backend for st in steps] == [kind] * 3 and [st.policy_version for st in steps] == [0, 0, 1]
        for step, max_tokens in zip(steps, (8, 8, 4), strict=True):
            local = run(engine.generate(request(step.observation_ids, max_new_tokens=max_tokens)))
            assert step.action_ids == local.output_ids
            assert step.action_logprobs == pytest.approx(local.logprobs, abs=1e-5)
        assert [t.logprob for t in first.choices[0].logprobs.content] == pytest.approx(steps[0].action_logprobs,
                                                                                       abs=1e-6)
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == steps[1].action["content"] and third.choices[0].message.content == steps[2].action["content"]
        assert steps[1].parent_index == 0 and not steps[1].drift  # the second call extended the first exactly
    finally:
        store.close()


def test_settings_alone_select_the_remote_backend(engine, tiny_model_path, tmp_path):
    """What `agentr1 gateway --backend vllm --backend-url URL --model DIR` builds: no backend object passed."""
    remote = fake_vllm.create_app(engine, model_path=tiny_model_path, served_model_name="policy")
    with served(remote) as url:
        settings = GatewaySettings(db=str(tmp_path / "s.db"), backend="vllm", backend_urls=[url],
                                   model=str(tiny_model_path))
        with BackgroundServer(create_app(settings)) as gateway:
            client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="x")
            answer = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}],
                                                    max_tokens=3, temperature=0)
            assert answer.usage.completion_tokens == 3 and answer.model == "policy"
    store = TraceStore.open(str(tmp_path / "s.db"))
    try:
        [session] = store.list_sessions()
        assert [st.backend for st in store.get_session(session.id).steps] == ["vllm"]
    finally:
        store.close()


@pytest.mark.parametrize("kind", KINDS)
def test_echo_with_logprobs_scores_the_prompt_on_the_remote_server(kind, engine, tiny_model_path, tmp_path):
    """SGLang asked with logprob_start_len 0, vLLM with prompt_logprobs (issue 59): the echoed prompt's values and
    alternatives are the engine's, whole and streamed (vLLM streams none: the call is answered in one piece)."""
    fake, backend_class = KINDS[kind]
    remote = fake.create_app(engine, model_path=tiny_model_path, served_model_name="policy")
    prompt = "Once upon a time there was"
    with served(remote) as url:
        backend = backend_class([url], tokenizer=str(tiny_model_path))
        with BackgroundServer(create_app(GatewaySettings(db=str(tmp_path / "e.db")), backend=backend)) as gateway:
            client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="x")
            kwargs = {"model": "policy", "prompt": prompt, "max_tokens": 3, "temperature": 0, "echo": True,
                      "logprobs": 2}
            whole = client.completions.create(**kwargs).choices[0].logprobs
            chunks = list(client.completions.create(**kwargs, stream=True))
        sent = remote.state.fake.requests[0]
    tok = engine.engine.tokenizer
    ids = tok.encode(prompt, add_special_tokens=False)
    local = run(engine.generate(GenerateRequest(ids, SamplingParams(max_new_tokens=3, temperature=0.0, top_logprobs=2),
                                                prompt_logprobs=True)))
    n = len(ids)
    assert sent.get("logprob_start_len", sent.get("prompt_logprobs")) == (0 if kind == "sglang" else 2)
    assert whole.token_logprobs[0] is None and whole.top_logprobs[0] is None
    assert whole.token_logprobs[1:n] == pytest.approx(local.prompt_logprobs[1:], abs=1e-5)
    alternatives = [sorted(top, key=top.get, reverse=True) for top in whole.top_logprobs[1:n]]
    assert alternatives == [[tok.decode([a.token_id]) for a in top] for top in local.prompt_top_logprobs[1:]]
    echo = chunks[0].choices[0]
    assert echo.text == prompt and echo.logprobs.token_logprobs == pytest.approx(whole.token_logprobs[:n], abs=1e-6)
