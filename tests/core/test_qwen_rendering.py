"""Qwen2.5-Coder's own chat template on its real tokenizer (issue 39): the prompt ids are the tokenizer's own
rendering, multi-turn steps extend token for token, ``<tool_call>`` (one token in Qwen's vocabulary) is parsed
into OpenAI tool calls, and forced calls are prefilled with Qwen's single-token tag."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from agentr1.core.rendering import ChatTemplateRenderer, PreviousTurn, load_renderer, plan_prompt

CALC = {"type": "function", "function": {
    "name": "calc", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
CONVERSATIONS = [
    ([{"role": "user", "content": "Hi 1"}], None),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "12*7?\n\n3"}], [CALC]),
    ([{"role": "user", "content": "12*7?"},
      {"role": "assistant", "content": "", "tool_calls": [
          {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"expression": "12*7"}'}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "84"},
      {"role": "assistant", "content": "84."}, {"role": "user", "content": "Thanks ✓"}], [CALC]),
]


@pytest.fixture(scope="module")
def tokenizer(tiny_qwen_path):
    return AutoTokenizer.from_pretrained(tiny_qwen_path)


@pytest.fixture(scope="module")
def renderer(tiny_qwen_path):
    return load_renderer(tiny_qwen_path)


def _template_ids(tokenizer, messages, tools):
    # transformers wants tool-call arguments as objects (Qwen's template writes them with tojson)
    import json

    fixed = [{**m, "tool_calls": [{**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                                  for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in messages]
    return tokenizer.apply_chat_template(fixed, tools=tools, add_generation_prompt=True, tokenize=True,
                                         return_dict=False)


def test_qwen_renders_through_its_own_template(renderer, tokenizer):
    assert isinstance(renderer, ChatTemplateRenderer) and renderer.hermes
    assert renderer.end_of_turn_ids == (151645,)  # <|im_end|>
    for messages, tools in CONVERSATIONS:
        assert renderer.render(messages, tools) == _template_ids(tokenizer, messages, tools)
    assert renderer.render(*CONVERSATIONS[0])[:3] == [151644, 8948, 198]  # <|im_start|>system\n (Qwen's default)


def test_a_sampled_tool_call_is_parsed_and_the_next_turn_extends_it(renderer, tokenizer):
    messages, tools = [{"role": "user", "content": "12*7?"}], [CALC]
    first = plan_prompt(None, messages, tools, renderer)
    # as the model samples it: <tool_call> is one token, the JSON pretty-printed (re-rendering would differ)
    action = tokenizer.encode('<tool_call>\n{"name": "calc",\n "arguments": {"expression": "12*7"}}\n</tool_call>')
    action += [tokenizer.eos_token_id]
    assert action[0] == 151657
    parsed = renderer.parse(action)
    assert parsed.finished and parsed.content is None
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.tool_calls] == [
        ("calc", '{"expression": "12*7"}')]
    reply = parsed.to_message()
    previous = PreviousTurn(messages=messages, tools=tools, prompt_ids=first.prompt_ids, action_ids=action,
                            assistant_message=reply)
    follow = [*messages, {**reply, "tool_calls": [{**reply["tool_calls"][0], "id": "sdk-made"}]},
              {"role": "tool", "tool_call_id": "sdk-made", "content": "84"}]
    second = plan_prompt(previous, follow, tools, renderer)
    assert second.continued and not second.drift
    assert second.prompt_ids[: len(first.prompt_ids) + len(action)] == first.prompt_ids + action
    tail = tokenizer.decode(second.new_ids)
    assert tail == "\n<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert second.prompt_ids != _template_ids(tokenizer, follow, tools)  # a fresh render would rewrite the call


def test_forced_tool_calls_are_prefilled_with_qwens_tag(renderer, tokenizer):
    messages, tools = [{"role": "user", "content": "12*7?"}], [CALC]
    required = plan_prompt(None, messages, tools, renderer, tool_choice="required")
    assert required.prefill == "<tool_call>\n"
    assert required.prompt_ids == [*_template_ids(tokenizer, messages, tools), 151657, 198]
    named = plan_prompt(None, messages, tools, renderer, tool_choice={"type": "function", "function": {"name": "calc"}})
    rest = [*tokenizer.encode(' {"expression": "1+1"}}\n</tool_call>'), tokenizer.eos_token_id]
    call = renderer.parse(rest, prefill=named.prefill).tool_calls
    assert call[0]["function"] == {"name": "calc", "arguments": '{"expression": "1+1"}'}
