"""The gateway on the embedded engine: a tiny random model for speed, SmolLM2 in the slow test."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from gateway_harness import serve

CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


def _session(url: str, **body) -> dict:
    return httpx.post(f"{url}/sessions", json=body).json()


def test_openai_sync_async_and_streaming_on_the_tiny_model(tmp_path, tiny_model_path):
    with serve(tmp_path / "t.db", model=str(tiny_model_path), accept_any_model=True) as (url, store):
        s = _session(url)
        client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=12,
                                           logprobs=True, top_logprobs=2, seed=1)
        step = store.get_session(s["id"]).steps[0]
        assert len(step.action_ids) == r.usage.completion_tokens == len(step.action_logprobs)
        assert [t.logprob for t in r.choices[0].logprobs.content] == pytest.approx(step.action_logprobs, abs=1e-6)
        assert all(len(t.top_logprobs) == 2 for t in r.choices[0].logprobs.content)

        async def run_async() -> str:
            aclient = openai.AsyncOpenAI(base_url=s["base_url"], api_key=s["api_key"])
            stream = await aclient.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hello"}], max_tokens=12, stream=True)
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

        streamed = asyncio.run(run_async())
        steps = store.get_session(s["id"]).steps
        assert len(steps) == 2 and steps[1].action["content"] == streamed


def test_fifty_concurrent_sessions_never_mix_steps(tmp_path, tiny_model_path):
    with serve(tmp_path / "c.db", model=str(tiny_model_path), accept_any_model=True) as (url, store):

        async def agent(i: int) -> str:
            s = await asyncio.to_thread(_session, url, task_id=f"task-{i}")
            client = openai.AsyncOpenAI(base_url=s["base_url"], api_key=s["api_key"])
            messages = [{"role": "user", "content": f"session marker {i}"}]
            for turn in range(2):
                r = await client.chat.completions.create(model="m", messages=messages, max_tokens=6, temperature=1.0)
                messages += [r.choices[0].message.model_dump(exclude_none=True),
                             {"role": "user", "content": f"turn {turn} of {i}"}]
            return s["id"]

        async def main() -> list[str]:
            return await asyncio.gather(*(agent(i) for i in range(50)))

        ids = asyncio.run(main())
        for i, sid in enumerate(ids):
            trace = store.get_session(sid)
            assert trace.task_id == f"task-{i}" and [s.index for s in trace.steps] == [0, 1]
            first, second = trace.steps
            assert first.messages_sent[0]["content"] == f"session marker {i}"
            assert second.messages_sent[-1]["content"] == "turn 0 of " + str(i)
            prefix = first.observation_ids + first.action_ids
            assert second.observation_ids[: len(prefix)] == prefix and not second.drift


@pytest.mark.slow
def test_smollm2_two_turn_tool_agent_exact_tokens(tmp_path, smollm2_path):
    from agentr1.core.rendering import load_renderer

    tok = load_renderer(smollm2_path).tokenizer
    with serve(tmp_path / "s.db", model=str(smollm2_path), accept_any_model=True) as (url, store):
        s = _session(url, task_id="mul")
        client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
        messages = [{"role": "system", "content": "Use the calculator tool for arithmetic."},
                    {"role": "user", "content": "What is 12*7?"}]
        replies = []
        for _ in range(2):
            r = client.chat.completions.create(model="m", messages=messages, tools=[CALCULATOR], max_tokens=64,
                                               temperature=0.7, seed=3)
            message = r.choices[0].message
            replies.append(message)
            messages.append(message.model_dump(exclude_none=True))
            if message.tool_calls:
                for call in message.tool_calls:
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": "84"})
            else:
                messages.append({"role": "user", "content": "Check it with the calculator."})
        steps = store.get_session(s["id"]).steps
        assert len(steps) == 2
        for step, message in zip(steps, replies, strict=True):
            text = tok.decode(step.action_ids, skip_special_tokens=True)
            if message.tool_calls:
                assert json.loads(message.tool_calls[0].function.arguments) is not None
                assert message.tool_calls[0].function.name in text
            else:
                assert text.strip() == (message.content or "").strip()
            assert len(step.action_logprobs) == len(step.action_ids)
        one, two = steps
        assert two.observation_ids[: len(one.observation_ids) + len(one.action_ids)] == (
            one.observation_ids + one.action_ids)
        assert not two.drift
