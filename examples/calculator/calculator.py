"""Arithmetic tasks, a calculator tool, an OpenAI-client agent, and an exact-answer reward."""

from __future__ import annotations

import json
import random
import re
from typing import Any

from agentr1.sdk import openai_client

SYSTEM = ("You are a careful math assistant. You can call the calculator tool. "
          "End your reply with the final answer as a number.")
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


def make_tasks(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """Sums and products of small numbers: easy enough that the untrained 135M model sometimes succeeds."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        a, b = rng.randint(1, 20), rng.randint(1, 9)
        op = rng.choice(["+", "+", "-", "*"])
        answer = {"+": a + b, "-": a - b, "*": a * b}[op]
        tasks.append({"id": f"{split}-{i}", "question": f"What is {a} {op} {b}?", "answer": answer})
    return tasks


EASY_VAL_PROBLEMS = 32  # of the 126 one-digit problems, held out from training


def make_easy_tasks(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """Sums and differences of one-digit numbers, asked for the bare number. The untrained SmolLM2-135M
    solves about 15% of them at temperature 1 (make_tasks: about 0%), so GRPO has a signal from the start.

    There are only 126 such problems (a + b, and a - b with a >= b): a fixed 32 of them are the
    validation problems and never appear in training; ``n`` tasks cycle over the split's problems."""
    problems = [(a, op, b) for a in range(1, 10) for b in range(1, 10) for op in "+-" if op == "+" or a >= b]
    random.Random(20261129).shuffle(problems)
    pool = problems[:EASY_VAL_PROBLEMS] if split == "val" else problems[EASY_VAL_PROBLEMS:]
    random.Random(seed).shuffle(pool)
    tasks = []
    for i in range(n):
        a, op, b = pool[i % len(pool)]
        tasks.append({"id": f"{split}-{i}", "question": f"What is {a} {op} {b}? Reply with only the number.",
                      "answer": a + b if op == "+" else a - b})
    return tasks


def calculator(expression: str) -> str:
    if not re.fullmatch(r"[\d\s+\-*/().]+", expression or ""):
        return "error: only numbers and + - * / ( ) are allowed"
    try:
        return str(eval(expression, {"__builtins__": {}}, {}))  # restricted to arithmetic by the regex above
    except Exception as exc:
        return f"error: {exc}"


def solve(task: dict[str, Any], *, max_turns: int = 3, max_tokens: int = 64, temperature: float = 1.0) -> str:
    """The agent: a plain OpenAI tool-calling loop. Returns its final answer text."""
    client = openai_client()
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": task["question"]}]
    answer = ""
    for _ in range(max_turns):
        reply = client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR],
                                               max_tokens=max_tokens, temperature=temperature)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        answer = message.content or ""
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            try:
                expression = str(json.loads(call.function.arguments).get("expression", ""))
            except (json.JSONDecodeError, AttributeError):
                expression = ""
            messages.append({"role": "tool", "tool_call_id": call.id, "content": calculator(expression)})
    return answer


def final_number(text: str) -> float | None:
    numbers = re.findall(r"-?\d+(?:\.\d+)?", (text or "").replace(",", ""))
    return float(numbers[-1]) if numbers else None


def exact_answer(session: Any, task: dict[str, Any]) -> float:
    """1 when the last number of the agent's final message equals the answer, else 0."""
    if not session.steps:
        return 0.0
    final = session.steps[-1].action.get("content") or ""
    value = final_number(final)
    return float(value is not None and abs(value - float(task["answer"])) < 1e-6)
