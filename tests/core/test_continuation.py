"""The exact multi-turn bridge on SmolLM2's real tokenizer: prefix property, what continues, what drifts."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from transformers import AutoTokenizer

from agentr1.core.models import ensure_smollm2
from agentr1.core.rendering import (
    ChatTemplateRenderer,
    PreviousTurn,
    canonical_message,
    create_renderer,
    plan_prompt,
)

CALC = {"type": "function", "function": {
    "name": "calc", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
LOOKUP = {"type": "function", "function": {
    "name": "lookup", "description": "Look a word up.",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}, "limit": {"type": "integer"}}}}}
TOOLS = [CALC, LOOKUP]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(ensure_smollm2())


@pytest.fixture(scope="module", params=["chatml", "template"])
def renderer(request, tokenizer):
    return create_renderer(tokenizer, request.param)


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def sample(tokenizer, text: str, *, end: bool = True) -> list[int]:
    return encode(tokenizer, text) + ([tokenizer.eos_token_id] if end else [])


def step(renderer, previous, messages, tools, action_ids, **kwargs):
    """One model call: plan the prompt, 'sample' ``action_ids``, answer; -> (plan, PreviousTurn)."""
    plan = plan_prompt(previous, messages, tools, renderer, **kwargs)
    reply = renderer.parse(action_ids, prefill=plan.prefill).to_message()
    return plan, PreviousTurn(messages=list(messages), tools=tools, prompt_ids=plan.prompt_ids,
                              action_ids=list(action_ids), assistant_message=reply, prefill=plan.prefill)


def assert_extends(plan, previous: PreviousTurn) -> None:
    assert plan.continued and not plan.drift and plan.reason == "continued"
    head = previous.prompt_ids + previous.action_ids[: plan.action_kept]
    assert plan.prompt_ids[: len(head)] == head
    assert plan.prompt_ids[len(head):] == plan.new_ids
    assert plan.new_ids[: len(plan.closing_ids)] == plan.closing_ids


# -- the cases -----------------------------------------------------------------------------------

CALL_TEXT = '<tool_call>\n{"name": "calc", "arguments": {"expression": "12*7"}}\n</tool_call>'


def test_new_conversation_is_rendered_and_not_drift(renderer):
    messages = [{"role": "user", "content": "12*7?"}]
    plan = plan_prompt(None, messages, TOOLS, renderer)
    assert plan.prompt_ids == renderer.render(messages, TOOLS)
    assert not plan.drift and not plan.continued and plan.reason == "new"
    assert plan.new_messages == messages and plan.new_ids == plan.prompt_ids


def test_tool_call_turn_continues_exactly(renderer, tokenizer):
    messages = [{"role": "user", "content": "12*7?"}]
    _, prev = step(renderer, None, messages, TOOLS, sample(tokenizer, CALL_TEXT))
    call_id = prev.assistant_message["tool_calls"][0]["id"]
    new = [{"role": "tool", "tool_call_id": call_id, "content": "84"}]
    plan = plan_prompt(prev, [*messages, prev.assistant_message, *new], TOOLS, renderer)
    assert_extends(plan, prev)
    assert plan.action_kept == len(prev.action_ids) and plan.closing_ids == [] and plan.new_messages == new
    assert tokenizer.decode(plan.new_ids) == ("\n<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n"
                                              "<|im_start|>assistant\n")


def test_reserialized_reply_still_continues(renderer, tokenizer):
    text = 'Checking.\n<tool_call>\n{"name": "lookup", "arguments": {"word": "zebra", "limit": 3}}\n</tool_call>'
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "zebra?"}]
    _, prev = step(renderer, None, messages, TOOLS, sample(tokenizer, text))
    reply = prev.assistant_message
    call = reply["tool_calls"][0]
    echoes = [
        {**reply, "content": "Checking. ", "refusal": None, "annotations": [], "audio": None},
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."}], "tool_calls": [
            {"id": "call_regenerated", "type": "function",
             "function": {"name": "lookup", "arguments": '{"limit":3,"word":"zebra"}'}}]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {**call, "function": {"name": "lookup", "arguments": {"word": "zebra", "limit": 3}}}]},
    ]
    for echo in echoes:
        tool = {"role": "tool", "tool_call_id": echo["tool_calls"][0]["id"], "content": "striped horse"}
        assert_extends(plan_prompt(prev, [*messages, echo, tool], TOOLS, renderer), prev)
    _, plain = step(renderer, None, messages, None, sample(tokenizer, "Fine."))
    for content in ("Fine.", " Fine.\n", [{"type": "text", "text": "Fine."}]):
        echo = {"role": "assistant", "content": content, "reasoning_content": None, "tool_calls": []}
        assert_extends(plan_prompt(plain, [*messages, echo, {"role": "user", "content": "ok"}], None, renderer), plain)
    _, empty = step(renderer, None, messages, TOOLS, sample(tokenizer, ""))
    for content in (None, ""):
        echo = {"role": "assistant", "content": content}
        assert_extends(plan_prompt(empty, [*messages, echo, {"role": "user", "content": "?"}], TOOLS, renderer), empty)


def test_rewritten_history_drifts(renderer, tokenizer):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "first 1"},
                {"role": "assistant", "content": "one"}, {"role": "user", "content": "second 2"}]
    _, prev = step(renderer, None, messages, None, sample(tokenizer, "two"))
    reply, nxt = prev.assistant_message, {"role": "user", "content": "third 3"}
    cases = {
        "history_changed": [
            [messages[0], {"role": "user", "content": "first 1 (edited)"}, *messages[2:], reply, nxt],
            [{"role": "system", "content": "S2"}, *messages[1:], reply, nxt],
            [messages[0], *messages[3:], reply, nxt],  # dropped turns
            messages[:2],
        ],
        "reply_changed": [[*messages, {"role": "assistant", "content": "two, edited"}, nxt],
                          [*messages, {**reply, "tool_calls": [{"id": "1", "type": "function", "function": {
                              "name": "calc", "arguments": "{}"}}]}, nxt]],
        "reply_missing": [[*messages, nxt]],
    }
    for reason, variants in cases.items():
        for variant in variants:
            plan = plan_prompt(prev, variant, None, renderer)
            assert plan.drift and not plan.continued and plan.reason == reason
            assert plan.prompt_ids == renderer.render(variant) and plan.new_ids == plan.prompt_ids


def test_changed_tools_drift(renderer, tokenizer):
    messages = [{"role": "user", "content": "12*7?"}]
    _, prev = step(renderer, None, messages, TOOLS, sample(tokenizer, CALL_TEXT))
    follow = [*messages, prev.assistant_message,
              {"role": "tool", "tool_call_id": prev.assistant_message["tool_calls"][0]["id"], "content": "84"}]
    assert plan_prompt(prev, follow, [dict(t) for t in TOOLS], renderer).continued  # equal, other objects
    for tools, choice in (([CALC], None), ([LOOKUP, CALC], None), (None, None), (TOOLS, "none")):
        plan = plan_prompt(prev, follow, tools, renderer, tool_choice=choice)
        assert plan.drift and plan.reason == "tools_changed"
        assert plan.prompt_ids == renderer.render(follow, None if choice == "none" else tools)


def test_stop_string_without_end_of_turn_is_closed(renderer, tokenizer):
    messages = [{"role": "user", "content": "Think step by step: 3+4?"}]
    action = sample(tokenizer, "Thought: add them.\nObservation", end=False)  # stopped on "Observation"
    _, prev = step(renderer, None, messages, None, action)
    reply = {"role": "assistant", "content": "Thought: add them.\n"}  # the gateway drops the stop string
    prev.assistant_message = reply
    plan = plan_prompt(prev, [*messages, reply, {"role": "user", "content": "Observation: 7"}], None, renderer)
    assert_extends(plan, prev)
    assert plan.action_kept == len(action) and plan.closing_ids == [tokenizer.eos_token_id]
    head = [*prev.prompt_ids, *action, tokenizer.eos_token_id]
    assert plan.prompt_ids[: len(head)] == head


def test_tokens_sampled_after_the_end_of_turn_are_dropped(renderer, tokenizer):
    messages = [{"role": "user", "content": "hi"}]
    action = sample(tokenizer, "Hello!") + encode(tokenizer, "\n<|im_start|>user\nfake")
    _, prev = step(renderer, None, messages, None, action)
    assert prev.assistant_message["content"] == "Hello!"
    plan = plan_prompt(prev, [*messages, prev.assistant_message, {"role": "user", "content": "bye"}], None, renderer)
    assert_extends(plan, prev)
    assert plan.action_kept == len(sample(tokenizer, "Hello!"))
    assert plan.action_dropped == len(action) - plan.action_kept


def test_repeated_request_reuses_the_prompt(renderer, tokenizer):
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"}]
    _, prev = step(renderer, None, messages, None, sample(tokenizer, "d"))
    prev.prompt_ids = [*prev.prompt_ids]  # e.g. a bridged prompt a fresh render would not reproduce
    prev.prompt_ids[3] = 7
    plan = plan_prompt(prev, [dict(m) for m in messages], None, renderer)
    assert plan.prompt_ids == prev.prompt_ids and not plan.drift and not plan.continued and plan.reason == "repeat"


def test_tool_choice_prefill_continues(renderer, tokenizer):
    messages = [{"role": "user", "content": "look up cat"}]
    choice = {"type": "function", "function": {"name": "lookup"}}
    plan, prev = step(renderer, None, messages, TOOLS, sample(tokenizer, ' {"word": "cat"}}\n</tool_call>'),
                      tool_choice=choice)
    assert plan.prefill and tokenizer.decode(plan.prompt_ids).endswith("<|im_start|>assistant\n" + plan.prefill)
    call = prev.assistant_message["tool_calls"][0]
    assert call["function"] == {"name": "lookup", "arguments": '{"word": "cat"}'}
    follow = [*messages, prev.assistant_message, {"role": "tool", "tool_call_id": call["id"], "content": "a pet"}]
    nxt = plan_prompt(prev, follow, TOOLS, renderer, tool_choice="auto")
    assert_extends(nxt, prev)
    assert tokenizer.decode(nxt.prompt_ids).count('<tool_call>\n{"name": "lookup", "arguments": {"word": "cat"}}') == 1


def test_template_that_rewrites_history_is_not_bridged(tokenizer):
    other = AutoTokenizer.from_pretrained(ensure_smollm2())
    other.chat_template = ("{{ '<|im_start|>system\n' + (messages | length | string) + ' messages<|im_end|>\n' }}"
                           "{% for m in messages %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}"
                           "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
    renderer = ChatTemplateRenderer(other)
    messages = [{"role": "user", "content": "hi"}]
    _, prev = step(renderer, None, messages, None, sample(tokenizer, "yo"))
    follow = [*messages, prev.assistant_message, {"role": "user", "content": "again"}]
    plan = plan_prompt(prev, follow, None, renderer)
    assert plan.drift and plan.reason == "no_bridge" and plan.prompt_ids == renderer.render(follow)


def test_canonical_message_survives_json_and_reserialisation():
    ours = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": '{"a": 1, "b": [1, 2]}'}}]}
    theirs = json.loads(json.dumps({"role": "assistant", "content": "", "refusal": None, "tool_calls": [
        {"id": "other", "type": "function", "function": {"name": "calc", "arguments": '{"b":[1,2],"a":1}'}}]}))
    assert canonical_message(ours) == canonical_message(theirs)
    developer, system = {"role": "developer", "content": "x"}, {"role": "system", "content": "x"}
    assert canonical_message(developer) == canonical_message(system)
    assert canonical_message({"role": "user", "content": " x"}) != canonical_message({"role": "user", "content": "x"})
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}
    assert json.dumps(canonical_message(image))  # hashable for session attribution, no error


# -- round trip over generated conversations ----------------------------------------------------

WORDS = ["alpha", "Zürich", "12*7", "3.14", "x=42", "café", "(1, 2)", "2024-05-06", "\n", "\n\n", "  ", "100%", "ok"]


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(WORDS) + rng.choice([" ", "", "\n", ". "]) for _ in range(n)).strip() or "0"


def _split_some_tokens(tokenizer, ids: list[int], rng: random.Random) -> list[int]:
    """A non-canonical tokenisation of the same text, as sampling produces: some tokens split in two."""
    vocab, specials, out = tokenizer.get_vocab(), set(tokenizer.all_special_ids), []
    for tid in ids:
        piece = tokenizer.convert_ids_to_tokens(tid)
        cuts = [k for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
        if tid not in specials and cuts and rng.random() < 0.4:
            k = rng.choice(cuts)
            out += [vocab[piece[:k]], vocab[piece[k:]]]
        else:
            out.append(tid)
    return out


def _action(rng: random.Random, tools: Any) -> tuple[str, bool]:
    """Assistant text as a model might write it; True when it is written as we render it."""
    if tools and rng.random() < 0.5:
        calls = [{"name": "calc", "arguments": {"expression": _text(rng, 1)}} if rng.random() < 0.5
                 else {"name": "lookup", "arguments": {"word": _text(rng, 1), "limit": rng.randint(1, 99)}}
                 for _ in range(rng.choice([1, 1, 2]))]
        compact = rng.random() < 0.3  # the model's own spacing: parses, but renders differently
        blocks = ["<tool_call>\n" + json.dumps(c, ensure_ascii=False, separators=(",", ":") if compact else None)
                  + "\n</tool_call>" for c in calls]
        lead = _text(rng, 2) + "\n" if rng.random() < 0.3 else ""
        return lead + "\n".join(blocks), not compact
    if rng.random() < 0.15:
        return f"<think>\n{_text(rng, 3)}\n</think>\n\n{_text(rng, 2)}", False  # reasoning is not re-rendered
    return _text(rng, rng.randint(1, 8)), True


def _agent_echo(rng: random.Random, reply: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The agent sends our reply back re-serialised, as SDKs do; True when a fresh render of the
    echo still shows the arguments in the order the model wrote them."""
    echo: dict[str, Any] = {"role": "assistant", "content": reply.get("content") or rng.choice([None, ""])}
    if rng.random() < 0.5:
        echo.update(refusal=None, annotations=[])
    sort, same_order = rng.random() < 0.5, True
    if reply.get("tool_calls"):
        echo["tool_calls"] = []
        for call in reply["tool_calls"]:
            arguments = json.loads(call["function"]["arguments"])
            same_order = same_order and (not sort or list(arguments) == sorted(arguments))
            echo["tool_calls"].append({**call, "function": {**call["function"], "arguments": json.dumps(
                arguments, separators=(",", ":"), sort_keys=sort)}})
    return echo, same_order


def simulate(renderer, tokenizer, seed: int) -> dict[str, int]:
    """One agent conversation of 2-5 calls; checks every bridge; counts fresh re-render mismatches."""
    rng = random.Random(seed)
    tools = TOOLS if rng.random() < 0.6 else None
    messages: list[dict[str, Any]] = [{"role": "system", "content": _text(rng, 3)}] if rng.random() < 0.5 else []
    messages.append({"role": "user", "content": _text(rng, 4)})
    stats = {"steps": 0, "fresh_differs": 0, "exact_actions": 0, "checked_equal": 0}
    previous, all_exact = None, True
    for _ in range(rng.randint(2, 5)):
        plan = plan_prompt(previous, messages, tools, renderer)
        fresh = renderer.render(messages, tools)
        if previous is None:
            assert plan.prompt_ids == fresh and plan.reason == "new"
        else:
            assert_extends(plan, previous)
            stats["steps"] += 1
            stats["fresh_differs"] += plan.prompt_ids != fresh
            if all_exact:  # every action was sampled exactly as we render it: bridge == fresh render
                assert plan.prompt_ids == fresh
                stats["checked_equal"] += 1
        text, exact = _action(rng, tools)
        action = sample(tokenizer, text, end=rng.random() < 0.85)
        if rng.random() < 0.3:
            action, exact = _split_some_tokens(tokenizer, action, rng), False
        exact = exact and action[-1:] == [tokenizer.eos_token_id]
        stats["exact_actions"] += exact
        all_exact = all_exact and exact
        reply = renderer.parse(action).to_message()
        previous = PreviousTurn(messages=list(messages), tools=tools, prompt_ids=plan.prompt_ids,
                                action_ids=action, assistant_message=reply)
        echo, same_order = _agent_echo(rng, reply)
        all_exact = all_exact and same_order
        messages = [*messages, echo]
        for call in reply.get("tool_calls", []):
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": _text(rng, 3)})
        if not reply.get("tool_calls") or rng.random() < 0.2:
            messages.append({"role": "user", "content": _text(rng, 3)})
    return stats


def test_round_trip_over_generated_conversations(renderer, tokenizer):
    totals = {"steps": 0, "fresh_differs": 0, "exact_actions": 0, "checked_equal": 0}
    for seed in range(30):
        for key, value in simulate(renderer, tokenizer, seed).items():
            totals[key] += value
    assert totals["steps"] >= 60 and totals["checked_equal"] >= 15
    # Non-canonical tokenisations and the model's own formatting make fresh renders differ often:
    # the bridge exists for these. (Printed with -s; see docs/rendering.md for real-model numbers.)
    assert totals["fresh_differs"] > 0
    print(f"\n{type(renderer).__name__}: {totals}")


def test_both_renderers_bridge_to_the_same_ids(tokenizer):
    chatml, template = create_renderer(tokenizer, "chatml"), create_renderer(tokenizer, "template")
    for seed in range(8):
        messages = [{"role": "user", "content": f"q {seed}\n\n{seed * 7}"}]
        tools = TOOLS if seed % 2 else None
        action = sample(tokenizer, CALL_TEXT if tools else f"a {seed}", end=seed % 3 != 0)
        plans = []
        for renderer in (chatml, template):
            _, prev = step(renderer, None, messages, tools, action)
            follow = [*messages, prev.assistant_message]
            follow += ([{"role": "tool", "tool_call_id": "x", "content": "84\n\n1"}] if tools
                       else [{"role": "user", "content": "more 2"}])
            plans.append(plan_prompt(prev, follow, tools, renderer))
        assert plans[0].continued and plans[0].prompt_ids == plans[1].prompt_ids
        assert plans[0].new_ids == plans[1].new_ids


# -- the `renderers` package's bridges -----------------------------------------------------------


def test_renderers_adapter_bridges_exactly(tokenizer):
    import renderers
    tok = AutoTokenizer.from_pretrained(ensure_smollm2())
    tok.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"])
    tok.unk_token = None
    qwen3 = create_renderer(tok, "renderers", config=renderers.Qwen3RendererConfig())
    messages = [{"role": "user", "content": "12*7?"}]
    for end in (True, False):
        _, prev = step(qwen3, None, messages, TOOLS, sample(tok, CALL_TEXT, end=end))
        call = prev.assistant_message["tool_calls"][0]
        follow = [*messages, prev.assistant_message, {"role": "tool", "tool_call_id": call["id"], "content": "84"}]
        plan = plan_prompt(prev, follow, TOOLS, qwen3)
        assert_extends(plan, prev)
        assert plan.closing_ids == ([] if end else [tok.eos_token_id])
        assert tok.decode(plan.new_ids).endswith("<tool_response>\n84\n</tool_response><|im_end|>\n"
                                                 "<|im_start|>assistant\n")
        assert plan.prompt_ids == qwen3.render(follow, TOOLS)  # sampled canonically: same as a fresh render


def test_renderers_default_renderer_cannot_bridge(tokenizer):
    import renderers
    wrapped = create_renderer(tokenizer, "renderers", config=renderers.DefaultRendererConfig())
    messages = [{"role": "user", "content": "hi"}]
    _, prev = step(wrapped, None, messages, None, sample(tokenizer, "yo"))
    plan = plan_prompt(prev, [*messages, prev.assistant_message, {"role": "user", "content": "?"}], None, wrapped)
    assert plan.drift and plan.reason == "no_bridge"  # bridge_to_next_turn returns None: re-rendered
