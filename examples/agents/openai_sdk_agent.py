"""A calculator agent written with the OpenAI Python SDK — sync, async and streaming — recorded by agentr1.

The agent is an ordinary tool-calling loop. agentr1 adds two things: ``@rollout`` (each call of
``solve_*`` is one session, its return value the outcome reward) and a client from
``agentr1.adapters.openai`` (bound to that session).

    agentr1 gateway --model smollm2 --port 8000
    python examples/agents/openai_sdk_agent.py http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from typing import Any

import httpx

from agentr1.adapters.openai import async_client, client
from agentr1.sdk import configure, rollout

SYSTEM = "You are a careful math assistant. Use the calculator tool, then give the final number."
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
TASKS = [{"id": "mul-12-7", "question": "What is 12*7?", "answer": 84},
         {"id": "add-35-48", "question": "What is 35+48?", "answer": 83},
         {"id": "sub-90-17", "question": "What is 90-17?", "answer": 73}]
MAX_TURNS = 4
# task_id, group_id and run_id of each session, from the arguments of the decorated call
SESSION_FIELDS: dict[str, Any] = {"task_id": lambda task, **_: task["id"], "group_id": lambda task, **_: task["id"],
                                  "run_id": lambda task, **kw: kw.get("run_id")}


def calculator(expression: str) -> str:
    if not re.fullmatch(r"[\d\s+\-*/().]+", expression or ""):
        return "error: only numbers and + - * / ( ) are allowed"
    try:
        return str(eval(expression, {"__builtins__": {}}, {}))  # arithmetic only, checked above
    except Exception as exc:
        return f"error: {exc}"


def tool_results(tool_calls: list[Any]) -> list[dict[str, Any]]:
    results = []
    for call in tool_calls:
        try:
            expression = str(json.loads(call["function"]["arguments"]).get("expression", ""))
        except (json.JSONDecodeError, AttributeError):
            expression = ""
        results.append({"role": "tool", "tool_call_id": call["id"], "content": calculator(expression)})
    return results


def score(answer: str | None, task: dict[str, Any]) -> float:
    numbers = re.findall(r"-?\d+", (answer or "").replace(",", ""))
    return float(bool(numbers) and int(numbers[-1]) == task["answer"])


def start(task: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["question"]}]


@rollout(**SESSION_FIELDS)
def solve_sync(task: dict[str, Any], *, model: str, run_id: str | None = None) -> float:
    llm = client()
    messages = start(task)
    for _ in range(MAX_TURNS):
        message = llm.chat.completions.create(model=model, messages=messages, tools=[CALCULATOR],
                                              max_tokens=128).choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return score(message.content, task)
        messages += tool_results(messages[-1]["tool_calls"])
    return 0.0


@rollout(**SESSION_FIELDS)
async def solve_async(task: dict[str, Any], *, model: str, run_id: str | None = None) -> float:
    llm = async_client()
    messages = start(task)
    for _ in range(MAX_TURNS):
        reply = await llm.chat.completions.create(model=model, messages=messages, tools=[CALCULATOR], max_tokens=128)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return score(message.content, task)
        messages += tool_results(messages[-1]["tool_calls"])
    return 0.0


@rollout(**SESSION_FIELDS)
def solve_streaming(task: dict[str, Any], *, model: str, run_id: str | None = None) -> float:
    llm = client()
    messages = start(task)
    for _ in range(MAX_TURNS):
        content, calls = "", {}  # tool calls arrive in pieces, keyed by their index
        for chunk in llm.chat.completions.create(model=model, messages=messages, tools=[CALCULATOR], max_tokens=128,
                                                 stream=True):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            content += delta.content or ""
            for piece in delta.tool_calls or []:
                call = calls.setdefault(piece.index, {"id": "", "type": "function",
                                                      "function": {"name": "", "arguments": ""}})
                call["id"] = piece.id or call["id"]
                if piece.function is not None:
                    call["function"]["name"] += piece.function.name or ""
                    call["function"]["arguments"] += piece.function.arguments or ""
        tool_calls = [calls[i] for i in sorted(calls)]
        messages.append({"role": "assistant", "content": content, **({"tool_calls": tool_calls} if tool_calls else {})})
        if not tool_calls:
            return score(content, task)
        messages += tool_results(tool_calls)
    return 0.0


def served_model(gateway: str) -> str:
    return str(httpx.get(f"{gateway}/v1/models", timeout=30).json()["data"][0]["id"])


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gateway", help="the gateway's URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", help="model name (default: the one the gateway serves)")
    parser.add_argument("--limit", type=int, default=len(TASKS), help="how many tasks to run")
    parser.add_argument("--run-id", help="run the sessions belong to (default: the gateway's default run)")
    args = parser.parse_args(argv)
    configure(args.gateway)
    model = args.model or served_model(args.gateway)
    rewards = {}
    for task in TASKS[: args.limit]:
        options = {"model": model, "run_id": args.run_id}
        rewards[f"sync/{task['id']}"] = solve_sync(task, **options)
        rewards[f"async/{task['id']}"] = asyncio.run(solve_async(task, **options))
        rewards[f"streaming/{task['id']}"] = solve_streaming(task, **options)
    for name, value in rewards.items():
        print(f"{name}: reward {value}")
    return rewards


if __name__ == "__main__":
    main()
