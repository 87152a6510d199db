"""Standard OpenAI behaviour on the existing routes, on the embedded engine with the tiny model (real sampling,
real logprobs): top_logprobs on text completions, completions streamed token by token with a usage chunk,
logprobs in chat streams, cached-token usage."""

from __future__ import annotations

import httpx
import openai
import pytest
from gateway_harness import serve


@pytest.fixture(scope="module")
def tiny_gateway(tmp_path_factory, tiny_model_path):
    with serve(tmp_path_factory.mktemp("std") / "s.db", model=str(tiny_model_path), accept_any_model=True) as served:
        yield served


def test_completions_logprobs_carry_top_logprobs(tiny_gateway):
    url, store = tiny_gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x")
    r = client.completions.create(model="m", prompt="The sky is", max_tokens=6, logprobs=3, seed=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == r.usage.completion_tokens
    assert all(len(alternatives) == 3 for alternatives in lp.top_logprobs)
    # the sampled token's own logprob is the stored one
    step = store.get_session(r.model_extra["agentr1"]["session_id"]).steps[0]
    assert lp.token_logprobs == pytest.approx(step.action_logprobs, abs=1e-6)
    assert r.usage.prompt_tokens_details.cached_tokens >= 0


def test_completions_stream_token_by_token_with_a_usage_chunk(tiny_gateway):
    url, store = tiny_gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x")
    chunks = list(client.completions.create(model="m", prompt="Once upon a time", max_tokens=12, seed=5,
                                            temperature=1.0, stream=True, stream_options={"include_usage": True},
                                            stop=None))
    texts = [c.choices[0].text for c in chunks if c.choices]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1 and usage[0].completion_tokens == 12
    assert len([t for t in texts if t]) > 1  # not the whole text in one chunk
    sid = chunks[-2].model_extra["agentr1"]["session_id"] if chunks[-2].choices else None
    plain = client.completions.create(model="m", prompt="Once upon a time", max_tokens=12, seed=5, temperature=1.0)
    assert "".join(texts) == plain.choices[0].text
    assert sid is None or store.get_session(sid).steps


def test_chat_stream_sends_logprobs_for_every_token(tiny_gateway):
    url, store = tiny_gateway
    s = httpx.post(f"{url}/sessions", json={}).json()
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=10,
                                            logprobs=True, stream=True, seed=2)
    logprobs = [t.logprob for c in stream if c.choices and c.choices[0].logprobs
                for t in c.choices[0].logprobs.content]
    step = store.get_session(s["id"]).steps[0]
    assert logprobs == pytest.approx(step.action_logprobs, abs=1e-6)
