"""Constrained decoding end to end: a real gateway (uvicorn) serving the real SmolLM2-135M-Instruct on the embedded
engine, asked through the real ``openai`` and ``anthropic`` clients for JSON (``response_format``, ``text.format``)
and forced tool calls (``tool_choice``): the answers are valid by construction, the stored steps decode to them,
and unconstrained rows batched with constrained ones sample exactly what they sample without them."""

from __future__ import annotations

import asyncio
import json

import anthropic
import httpx
import jsonschema
import openai
import pytest
from gateway_harness import serve

from agentr1.core.generation import GenerateRequest, GrammarSpec, SamplingParams
from agentr1.core.rendering import load_renderer
from agentr1.engine import EngineOptions
from agentr1.gateway.backends import LocalBackend

pytestmark = pytest.mark.slow

CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                         "population": {"type": "integer", "minimum": 0, "maximum": 99999999},
                                         "capital": {"type": "boolean"}},
        "required": ["city", "population", "capital"], "additionalProperties": False}
WEATHER = {"type": "object", "properties": {"location": {"type": "string", "maxLength": 40},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["location", "unit"], "additionalProperties": False}
CALC = {"type": "object", "properties": {"expression": {"type": "string", "maxLength": 40}},
        "required": ["expression"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic",
                                           "parameters": CALC}}]
PROMPTS = ["Tell me about Paris.", "Describe a big city in Japan.", "What is the largest city in Brazil?"]


@pytest.fixture(scope="module")
def smollm2_gateway(tmp_path_factory, smollm2_path):
    with serve(tmp_path_factory.mktemp("constrained") / "c.db", model=str(smollm2_path),
               accept_any_model=True) as served:
        yield served


def _session(url):
    return httpx.post(f"{url}/sessions", json={}).json()


def _decodes_to_step(store, session_id, texts, tokenizer_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_path)
    steps = store.get_session(session_id).steps
    assert len(steps) == len(texts)
    for step, text in zip(steps, texts, strict=True):
        assert step.trainable and len(step.action_ids) == len(step.action_logprobs)
        assert tok.decode(step.action_ids, skip_special_tokens=True) == text
    return steps


def test_chat_json_schema_and_json_object_answers_parse_and_validate(smollm2_gateway, smollm2_path):
    url, store = smollm2_gateway
    s = _session(url)
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"], max_retries=0)
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}}
    texts = []
    for prompt in PROMPTS:
        r = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": prompt}],
                                           response_format=fmt, max_tokens=80, temperature=0)
        assert r.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(r.choices[0].message.content), CITY)
        texts.append(r.choices[0].message.content)
    r = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "Hi there!"}],
                                       response_format={"type": "json_object"}, max_tokens=80, temperature=0.7,
                                       seed=1)
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    texts.append(r.choices[0].message.content)
    steps = _decodes_to_step(store, s["id"], texts, smollm2_path)
    assert all(lp <= 0 for st in steps for lp in st.action_logprobs)


def test_streamed_json_schema_answer_is_the_same_as_the_plain_one(smollm2_gateway):
    url, _store = smollm2_gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    kwargs = {"model": "policy", "messages": [{"role": "user", "content": PROMPTS[0]}], "max_tokens": 80,
              "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": CITY}}}
    plain = client.chat.completions.create(**kwargs).choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(**kwargs, stream=True)
                       if c.choices)
    assert streamed == plain
    jsonschema.validate(json.loads(streamed), CITY)


def test_responses_text_format_json_schema(smollm2_gateway, smollm2_path):
    url, store = smollm2_gateway
    s = _session(url)
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"], max_retries=0)
    r = client.responses.create(model="policy", input=PROMPTS[1], max_output_tokens=80, temperature=0,
                                text={"format": {"type": "json_schema", "name": "city", "schema": CITY, "strict": True}})
    jsonschema.validate(json.loads(r.output_text), CITY)
    _decodes_to_step(store, s["id"], [r.output_text], smollm2_path)


def test_chat_tool_choice_required_and_named_give_calls_whose_arguments_validate(smollm2_gateway):
    url, store = smollm2_gateway
    s = _session(url)
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"], max_retries=0)
    cases = [("What's the weather like in Oslo?", "required", None),
             ("Hello! How are you today?", "required", None),  # a greeting: unforced, the model would just answer
             ("Hello! How are you today?", {"type": "function", "function": {"name": "calculator"}}, "calculator"),
             ("Is it raining in Lima?", {"type": "function", "function": {"name": "get_weather"}}, "get_weather")]
    schemas = {"get_weather": WEATHER, "calculator": CALC}
    for prompt, choice, name in cases:
        r = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": prompt}],
                                           tools=TOOLS, tool_choice=choice, max_tokens=96, temperature=0)
        assert r.choices[0].finish_reason == "tool_calls", r
        calls = r.choices[0].message.tool_calls
        assert len(calls) == 1 and (name is None or calls[0].function.name == name)
        jsonschema.validate(json.loads(calls[0].function.arguments), schemas[calls[0].function.name])
    steps = store.get_session(s["id"]).steps
    assert len(steps) == len(cases) and all(st.action["tool_calls"] for st in steps)


def test_responses_and_anthropic_forced_tool_calls(smollm2_gateway):
    url, _store = smollm2_gateway
    s = _session(url)
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"], max_retries=0)
    responses_tools = [{"type": "function", **t["function"]} for t in TOOLS]
    r = client.responses.create(model="policy", input="Good morning!", tools=responses_tools, tool_choice="required",
                                max_output_tokens=96, temperature=0)
    calls = [item for item in r.output if item.type == "function_call"]
    assert len(calls) == 1
    jsonschema.validate(json.loads(calls[0].arguments), {"get_weather": WEATHER, "calculator": CALC}[calls[0].name])

    claude = anthropic.Anthropic(base_url=url, api_key=s["api_key"], max_retries=0)
    anthropic_tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
                        "input_schema": t["function"]["parameters"]} for t in TOOLS]
    for choice, name in (({"type": "any"}, None), ({"type": "tool", "name": "calculator"}, "calculator")):
        m = claude.messages.create(model="policy", max_tokens=96, tools=anthropic_tools, tool_choice=choice,
                                   messages=[{"role": "user", "content": "Thanks, bye!"}],
                                   extra_body={"temperature": 0})
        uses = [b for b in m.content if b.type == "tool_use"]
        assert m.stop_reason == "tool_use" and len(uses) == 1 and (name is None or uses[0].name == name)
        jsonschema.validate(uses[0].input, {"get_weather": WEATHER, "calculator": CALC}[uses[0].name])


def test_bad_formats_are_400_in_each_apis_shape(smollm2_gateway):
    url, _store = smollm2_gateway
    chat = httpx.post(f"{url}/v1/chat/completions", json={"model": "policy", "messages": [
        {"role": "user", "content": "hi"}], "response_format": {"type": "yaml"}})
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "response_format"
    bad_schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "required": "x"}}}
    chat = httpx.post(f"{url}/v1/chat/completions", json={"model": "policy", "messages": [
        {"role": "user", "content": "hi"}], "response_format": bad_schema})
    assert chat.status_code == 400 and "JSON Schema" in chat.json()["error"]["message"]
    resp = httpx.post(f"{url}/v1/responses", json={"model": "policy", "input": "hi",
                                                    "text": {"format": {"type": "xml"}}})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "text.format"


def test_unconstrained_rows_batched_with_a_constrained_one_sample_the_same_bits(smollm2_path):
    """Greedy rows in a batch with a grammar row give the same ids and log-probabilities as in the same batch
    where that row is unconstrained (admitted together: the backend is paused while they queue)."""
    async def batch(backend, grammar):
        renderer = load_renderer(smollm2_path)
        prompts = [renderer.render([{"role": "user", "content": p}], None, add_generation_prompt=True)
                   for p in PROMPTS]
        params = [SamplingParams(max_new_tokens=8, temperature=0), SamplingParams(max_new_tokens=8, temperature=0),
                  SamplingParams(max_new_tokens=40, temperature=0)]
        await backend.pause()
        jobs = [asyncio.create_task(backend.generate(GenerateRequest(list(ids), p, grammar=grammar if i == 2 else None)))
                for i, (ids, p) in enumerate(zip(prompts, params, strict=True))]
        while backend.queue_depth < 3:  # the grammar row queues after its (cached) compilation
            await asyncio.sleep(0.01)
        await backend.resume()
        return await asyncio.gather(*jobs)

    async def main():
        backend = LocalBackend(smollm2_path, EngineOptions(device="cpu", prefix_cache=False))
        await backend.start()
        try:
            grammar = GrammarSpec("json_schema", json.dumps(CITY))
            with_grammar = await batch(backend, grammar)
            without = await batch(backend, None)
        finally:
            await backend.close()
        assert json.loads(backend.engine.tokenizer.decode(with_grammar[2].output_ids, skip_special_tokens=True))
        assert with_grammar[2].output_ids != without[2].output_ids
        assert len(without[2].output_ids) > 8  # the third row outlives the others in both batches
        for a, b in zip(with_grammar[:2], without[:2], strict=True):
            assert (a.output_ids, a.logprobs) == (b.output_ids, b.logprobs)

    asyncio.run(main())
