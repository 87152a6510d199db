"""Qwen2.5-Coder's chat template and tool calls through every API of a real gateway (uvicorn, the embedded engine)
with the unmodified openai and anthropic clients (issue 39). Fast tests serve a tiny random Qwen2 with the real
Qwen2.5-Coder tokenizer and template (forced calls: the grammar makes even random weights call a tool); the slow
one serves the real Qwen2.5-Coder-0.5B-Instruct (dequantised from the packaged GGUF), asked by model name."""

from __future__ import annotations

import json
import re

import anthropic
import httpx
import openai
import pytest
from gateway_harness import serve
from transformers import AutoTokenizer

CALC_PARAMS = {"type": "object", "properties": {"expression": {"type": "string", "maxLength": 12}},
               "required": ["expression"], "additionalProperties": False}
CALC = {"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression.",
                                         "parameters": CALC_PARAMS}}
QUESTION = [{"role": "system", "content": "You are a helpful assistant. Use the calculator tool for arithmetic."},
            {"role": "user", "content": "What is 123*456?"}]


@pytest.fixture(scope="module")
def qwen_gateway(tmp_path_factory, tiny_qwen_path):
    with serve(tmp_path_factory.mktemp("qwen") / "q.db", model=str(tiny_qwen_path), accept_any_model=True) as served:
        yield served


@pytest.fixture(scope="module")
def tokenizer(tiny_qwen_path):
    return AutoTokenizer.from_pretrained(tiny_qwen_path)


def _session(url):
    return httpx.post(f"{url}/sessions", json={}).json()


def _template_ids(tokenizer, messages, tools):
    return tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                         return_dict=False)


def _one_call(calls):
    assert len(calls) == 1 and calls[0].function.name == "calculator"
    return json.loads(calls[0].function.arguments)


def test_chat_forced_call_plain_and_streamed_is_one_step_and_the_tool_result_extends_it(qwen_gateway, tokenizer):
    url, store = qwen_gateway
    kwargs = {"model": "policy", "messages": QUESTION, "tools": [CALC], "tool_choice": "required",
              "temperature": 0, "max_tokens": 48}
    plain, streamed = _session(url), _session(url)
    client = openai.OpenAI(base_url=plain["base_url"], api_key=plain["api_key"])
    message = client.chat.completions.create(**kwargs).choices[0].message
    assert isinstance(_one_call(message.tool_calls)["expression"], str)
    chunks = list(openai.OpenAI(base_url=streamed["base_url"], api_key="x").chat.completions.create(
        **kwargs, stream=True))
    streamed_args = "".join(d.function.arguments or "" for c in chunks for d in (c.choices[0].delta.tool_calls or []))
    assert streamed_args == message.tool_calls[0].function.arguments
    a, b = store.get_session(plain["id"]).steps[0], store.get_session(streamed["id"]).steps[0]
    assert (a.observation_ids, a.action_ids) == (b.observation_ids, b.action_ids)
    # the prompt is Qwen's own rendering + the forced opening `<tool_call>\n` (one token + newline)
    assert a.observation_ids == [*_template_ids(tokenizer, QUESTION, [CALC]), 151657, 198]
    assert a.action["tool_calls"][0]["id"] == message.tool_calls[0].id

    history = [*QUESTION, message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "56088"}]
    client.chat.completions.create(model="policy", messages=history, tools=[CALC], temperature=0, max_tokens=8)
    first, second = store.get_session(plain["id"]).steps
    assert second.parent_index == first.index and not second.drift
    done = [*first.observation_ids, *first.action_ids]
    assert second.observation_ids[: len(done)] == done
    assert tokenizer.decode(second.observation_ids[len(done):]).startswith(
        "\n<|im_start|>user\n<tool_response>\n56088\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_responses_forced_function_call(qwen_gateway):
    url, store = qwen_gateway
    s = _session(url)
    client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
    r = client.responses.create(model="policy", instructions=QUESTION[0]["content"], input=QUESTION[1]["content"],
                                tools=[{"type": "function", "name": "calculator", "parameters": CALC_PARAMS,
                                        "description": "Evaluate an arithmetic expression."}],
                                tool_choice="required", temperature=0, max_output_tokens=48)
    calls = [item for item in r.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "calculator" and "expression" in json.loads(calls[0].arguments)
    step = store.get_session(s["id"]).steps[0]
    assert step.action["tool_calls"][0]["function"]["arguments"] == calls[0].arguments


def test_messages_forced_tool_use(qwen_gateway):
    url, store = qwen_gateway
    s = _session(url)
    client = anthropic.Anthropic(base_url=url, api_key=s["api_key"], max_retries=0)
    r = client.messages.create(model="policy", max_tokens=48, system=QUESTION[0]["content"],
                               messages=[QUESTION[1]], tool_choice={"type": "any"}, extra_body={"temperature": 0},
                               tools=[{"name": "calculator", "description": "Evaluate an arithmetic expression.",
                                       "input_schema": CALC_PARAMS}])
    uses = [block for block in r.content if block.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "calculator" and isinstance(uses[0].input["expression"], str)
    step = store.get_session(s["id"]).steps[0]
    assert step.observation_ids[-2:] == [151657, 198] and step.action_ids


@pytest.mark.slow
def test_real_qwen_05b_calls_the_calculator_through_the_openai_client(tmp_path, qwen05_path):
    tokenizer = AutoTokenizer.from_pretrained(qwen05_path)
    with serve(tmp_path / "real.db", model="qwen2.5-coder-0.5b") as (url, store):
        models = openai.OpenAI(base_url=f"{url}/v1", api_key="x").models.list()
        assert [m.id for m in models.data] == ["qwen2.5-coder-0.5b-instruct"]
        s = _session(url)
        client = openai.OpenAI(base_url=s["base_url"], api_key=s["api_key"])
        tools = [{**CALC, "function": {**CALC["function"], "parameters": {**CALC_PARAMS, "properties": {
            "expression": {"type": "string", "maxLength": 40}}}}}]
        message = client.chat.completions.create(model="qwen2.5-coder-0.5b-instruct", messages=QUESTION, tools=tools,
                                                 tool_choice="required", temperature=0, max_tokens=48).choices[0].message
        expression = _one_call(message.tool_calls)["expression"]
        assert re.fullmatch(r"\s*123\s*\*\s*456\s*", expression), expression
        history = [*QUESTION, message.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "56088"}]
        client.chat.completions.create(model="qwen2.5-coder-0.5b-instruct", messages=history, tools=tools,
                                       temperature=0, max_tokens=32)
        first, second = store.get_session(s["id"]).steps
    assert first.observation_ids == [*_template_ids(tokenizer, QUESTION, tools), 151657, 198]
    assert tokenizer.decode(first.action_ids).endswith("</tool_call><|im_end|>")
    assert first.action["tool_calls"][0]["id"] == message.tool_calls[0].id
    assert len(first.action_logprobs) == len(first.action_ids) and first.trainable
    done = [*first.observation_ids, *first.action_ids]
    assert second.observation_ids[: len(done)] == done and not second.drift
