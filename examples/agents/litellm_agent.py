"""A calculator agent written with LiteLLM, recorded by agentr1: ``litellm.completion`` in a sync loop,
``litellm.acompletion`` for many tasks at once (one session each, concurrently).

``agentr1.adapters.litellm`` routes LiteLLM to the gateway as an OpenAI-compatible provider
(``openai/<model>`` + ``api_base`` of the current session).

    agentr1 gateway --model smollm2 --port 8000
    python examples/agents/litellm_agent.py http://127.0.0.1:8000
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before litellm is imported: no cost-map download

import argparse
import asyncio
import json
import re
from typing import Any

import httpx

from agentr1.adapters import litellm as a1
from agentr1.sdk import configure, rollout

SYSTEM = "You are a careful math assistant. Use the calculator tool, then give the final number."
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
TASKS = [{"id": "mul-12-7", "question": "What is 12*7?", "answer": 84},
         {"id": "add-35-48", "question": "What is 35+48?", "answer": 83},
         {"id": "sub-90-17", "question": "What is 90-17?", "answer": 73}]
MAX_TURNS = 4
SESSION_FIELDS: dict[str, Any] = {"task_id": lambda task, **_: task["id"], "group_id": lambda task, **_: task["id"],
                                  "run_id": lambda task, **kw: kw.get("run_id")}


def calculator(expression: str) -> str:
    if not re.fullmatch(r"[\d\s+\-*/().]+", expression or ""):
        return "error: only numbers and + - * / ( ) are allowed"
    try:
        return str(eval(expression, {"__builtins__": {}}, {}))  # arithmetic only, checked above
    except Exception as exc:
        return f"error: {exc}"


def act(message: Any, messages: list[dict[str, Any]]) -> bool:
    """Append the reply and its tool results; True when the agent is done."""
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls or []:
        try:
            expression = str(json.loads(call.function.arguments).get("expression", ""))
        except (json.JSONDecodeError, AttributeError):
            expression = ""
        messages.append({"role": "tool", "tool_call_id": call.id, "content": calculator(expression)})
    return not message.tool_calls


def score(answer: str | None, task: dict[str, Any]) -> float:
    numbers = re.findall(r"-?\d+", (answer or "").replace(",", ""))
    return float(bool(numbers) and int(numbers[-1]) == task["answer"])


@rollout(**SESSION_FIELDS)
def solve(task: dict[str, Any], *, model: str, run_id: str | None = None) -> float:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["question"]}]
    for _ in range(MAX_TURNS):
        message = a1.completion(model, messages=messages, tools=[CALCULATOR], max_tokens=128).choices[0].message
        if act(message, messages):
            return score(message.content, task)
    return 0.0


@rollout(**SESSION_FIELDS)
async def asolve(task: dict[str, Any], *, model: str, run_id: str | None = None) -> float:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["question"]}]
    for _ in range(MAX_TURNS):
        reply = await a1.acompletion(model, messages=messages, tools=[CALCULATOR], max_tokens=128)
        message = reply.choices[0].message
        if act(message, messages):
            return score(message.content, task)
    return 0.0


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gateway", help="the gateway's URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", help="model name (default: the one the gateway serves)")
    parser.add_argument("--limit", type=int, default=len(TASKS), help="how many tasks to run")
    parser.add_argument("--run-id", help="run the sessions belong to (default: the gateway's default run)")
    args = parser.parse_args(argv)
    configure(args.gateway)
    model = args.model or str(httpx.get(f"{args.gateway}/v1/models", timeout=30).json()["data"][0]["id"])
    tasks, options = TASKS[: args.limit], {"model": model, "run_id": args.run_id}
    rewards = {f"sync/{task['id']}": solve(task, **options) for task in tasks}

    async def all_at_once() -> list[float]:
        return await asyncio.gather(*(asolve(task, **options) for task in tasks))

    rewards.update({f"async/{task['id']}": r for task, r in zip(tasks, asyncio.run(all_at_once()), strict=True)})
    for name, value in rewards.items():
        print(f"{name}: reward {value}")
    return rewards


if __name__ == "__main__":
    main()
