"""The GSM8K task as an unmodified OpenAI-SDK agent: a plain tool-calling loop, no agentr1.envs.

It reads the same Agent-R1 row as the ToolEnv recipe (prompt, env_kwargs, reward_model) and runs
the calculator itself; pointed at the gateway (an agentr1 session), its steps are recorded exactly
like the environment's. ``tests/envs/test_gsm8k_equivalence.py`` checks that they are the same.

    agentr1 train examples/gsm8k/train.yaml agent.entrypoint=examples.gsm8k.agent:solve
"""

from __future__ import annotations

import json
from typing import Any

from examples.gsm8k.task import Calculator, calculate, exact_match

from agentr1.sdk import openai_client

TOOLS = [Calculator().schema()]


def tool_message(call: Any) -> dict[str, Any]:
    """Run one tool call of the model; the tool message that answers it."""
    if call.function.name != "calculator":
        content = f"error: unknown tool {call.function.name!r}; available tools: ['calculator']"
    else:
        try:
            arguments = json.loads(call.function.arguments or "{}")
        except json.JSONDecodeError as exc:
            arguments, content = None, f"error: arguments of calculator are not valid JSON ({exc.msg})"
        if isinstance(arguments, dict):
            content = calculate(str(arguments["expression"])) if "expression" in arguments else \
                "error: missing required argument(s) ['expression']"
        elif arguments is not None:
            content = f"error: arguments must be a JSON object, got {type(arguments).__name__}"
    return {"role": "tool", "tool_call_id": call.id, "content": content}


def solve(task: dict[str, Any]) -> float:
    """Answer one row; returns the exact-match reward of the model's last message."""
    client = openai_client()
    settings = task.get("env_kwargs") or {}
    messages: list[dict[str, Any]] = [dict(m) for m in task["prompt"]]
    last_content = ""
    for _ in range(int(settings.get("max_steps") or 3)):
        message = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS,
                                                 **(settings.get("sampling") or {})).choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        last_content = message.content or ""
        if not message.tool_calls:
            break
        messages.extend(tool_message(call) for call in message.tool_calls)
    return exact_match(last_content, task["reward_model"]["ground_truth"])
