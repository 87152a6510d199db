"""Arithmetic tasks, a calculator tool, an OpenAI-client agent, and an exact-answer reward."""

from __future__ import annotations

import functools
import hashlib
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


SPLITS = ("train", "val", "test")
HELD_OUT_BUCKETS = {"val": (0, 1), "test": (2, 3)}  # of a problem's 10 hash buckets; the other 6 are training's


def computation(a: int, op: str, b: int) -> tuple[int, str, int]:
    """The problem ``a op b`` with the operands of + and * sorted: ``5 + 3`` and ``3 + 5`` are one computation."""
    left, right = sorted((a, b)) if op in "+*" else (a, b)
    return left, op, right


def problem_split(a: int, op: str, b: int) -> str:
    """The split of ``make_tasks``' problem ``a op b``: a fixed hash of its :func:`computation` in 10 buckets, 2 for
    val, 2 for test, 6 for train. No problem, nor its swapped twin, can be in two splits, whatever the seeds."""
    key = "".join(map(str, computation(a, op, b)))
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 10
    return next((split for split, buckets in HELD_OUT_BUCKETS.items() if bucket in buckets), "train")


EASY_HELD_OUT = 32  # make_easy_tasks' problems in each held-out split (test: a few more, to keep twins together)


@functools.cache
def easy_problems(split: str) -> tuple[tuple[int, str, int], ...]:
    """``make_easy_tasks``' problems of ``split``: disjoint index ranges of the 126 one-digit problems in a fixed
    shuffled order. val: the first 32 (the recipe's held-out problems from its start); test: the next problems, 32
    and any swapped twin of them; train: the rest. A problem whose swapped twin is in val is in no split, so no
    :func:`computation` is in two."""
    problems = [(a, op, b) for a in range(1, 10) for b in range(1, 10) for op in "+-" if op == "+" or a >= b]
    random.Random(20261129).shuffle(problems)
    val = problems[:EASY_HELD_OUT]
    rest = [p for p in problems[EASY_HELD_OUT:] if computation(*p) not in {computation(*v) for v in val}]
    test_computations = {computation(*p) for p in rest[:EASY_HELD_OUT]}
    by_split = {"val": val, "test": [p for p in rest if computation(*p) in test_computations],
                "train": [p for p in rest if computation(*p) not in test_computations]}
    return tuple(by_split[split])


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


def make_tasks(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """Sums and products of small numbers: easy enough that the untrained 135M model sometimes succeeds.

    Problems are drawn as a in 1..20, b in 1..9, op from +, +, -, * (540 distinct problems) and kept only when
    :func:`problem_split` gives them to ``split`` (311 train, 128 val and 101 test problems). Training draws
    repeat; a held-out split's ``n`` tasks are distinct problems."""
    _check_split(split)
    available = sum(problem_split(a, op, b) == split for a in range(1, 21) for b in range(1, 10) for op in "+-*")
    if split != "train" and n > available:
        raise ValueError(f"there are {available} {split} problems, asked for {n}")
    rng = random.Random(seed)
    tasks: list[dict[str, Any]] = []
    seen: set[tuple[int, str, int]] = set()
    while len(tasks) < n:
        a, b = rng.randint(1, 20), rng.randint(1, 9)
        op = rng.choice(["+", "+", "-", "*"])
        if problem_split(a, op, b) != split or (split != "train" and (a, op, b) in seen):
            continue
        seen.add((a, op, b))
        answer = {"+": a + b, "-": a - b, "*": a * b}[op]
        tasks.append({"id": f"{split}-{len(tasks)}", "question": f"What is {a} {op} {b}?", "answer": answer})
    return tasks


def make_easy_tasks(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """Sums and differences of one-digit numbers, asked for the bare number. The untrained SmolLM2-135M
    solves about 15% of them at temperature 1 (make_tasks: about 0%), so GRPO has a signal from the start.

    There are only 126 such problems (a + b, and a - b with a >= b): :func:`easy_problems` splits them (val 32,
    test 32 and their twins, train the rest); ``n`` tasks cycle over the split's problems in a seeded order."""
    _check_split(split)
    pool = list(easy_problems(split))
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
