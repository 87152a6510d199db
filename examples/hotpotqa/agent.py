"""The agent: a plain OpenAI-SDK tool-calling loop with one tool, BM25 search over the paragraphs.

It keeps the whole conversation in its own message list; what the model sees of it is the session's
context policy, applied by the gateway (the recipe's train.yaml sets a sliding window over the last
turns, so long search results of early hops do not crowd the prompt)."""

from __future__ import annotations

import json
from typing import Any

from examples.hotpotqa.search import SEARCH_TOOL, search

from agentr1.sdk import openai_client

SYSTEM = ("You answer questions using Wikipedia. Call the search tool to find paragraphs; you may search "
          "several times, for example once for each entity in the question. When you know the answer, reply "
          "with 'Answer: ' followed by a short answer (a name, a date, a number, yes or no).")


def _tool_output(call: Any) -> str:
    if call.function.name != "search":
        return f"error: unknown tool {call.function.name!r}; the only tool is `search`"
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except json.JSONDecodeError as exc:
        return f"error: the arguments are not valid JSON ({exc.msg})"
    if not isinstance(arguments, dict):
        return "error: the arguments must be a JSON object with a `query`"
    return search(arguments.get("query"))


def solve(task: dict[str, Any], *, max_turns: int = 4, max_tokens: int = 64, temperature: float = 1.0) -> str:
    """Answer ``task["question"]``; returns the final reply ("" when the turns ran out while it was still
    searching). The reward functions read the recorded session, not this value."""
    client = openai_client()
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": f"Question: {task['question']}"}]
    for _ in range(max_turns):
        message = client.chat.completions.create(model="policy", messages=messages, tools=[SEARCH_TOOL],
                                                 max_tokens=max_tokens, temperature=temperature).choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        messages += [{"role": "tool", "tool_call_id": call.id, "content": _tool_output(call)}
                     for call in message.tool_calls]
    return ""
