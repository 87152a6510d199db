"""An agent that knows nothing of agentr1, run as a subprocess: one session per task.

Agent side (what runs in the subprocess): a plain OpenAI-client script. It reads
``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` (set by the runner to the task's session, and read by
every OpenAI client library anyway) and its task from ``AGENTR1_TASK``, and prints
``AGENTR1_REWARD=<x>`` for the runner to record. It could be any program in any language.

Driver side (``main``): :func:`agentr1.sdk.run_command` starts the script once per task.

    agentr1 gateway --model smollm2 --port 8000
    python examples/agents/subprocess_agent.py http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

SYSTEM = "You are a careful math assistant. Use the calculator tool, then give the final number."
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
TASKS = [{"id": "mul-12-7", "question": "What is 12*7?", "answer": 84},
         {"id": "add-35-48", "question": "What is 35+48?", "answer": 83},
         {"id": "sub-90-17", "question": "What is 90-17?", "answer": 73}]


def calculator(expression: str) -> str:
    if not re.fullmatch(r"[\d\s+\-*/().]+", expression or ""):
        return "error: only numbers and + - * / ( ) are allowed"
    try:
        return str(eval(expression, {"__builtins__": {}}, {}))  # arithmetic only, checked above
    except Exception as exc:
        return f"error: {exc}"


def agent() -> None:
    """The subprocess: no agentr1 import, only the OpenAI client and environment variables."""
    import openai

    task = json.loads(os.environ["AGENTR1_TASK"])
    client = openai.OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from the environment
    model = os.environ.get("OPENAI_MODEL", "policy")
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": task["question"]}]
    answer = ""
    for _ in range(4):
        message = client.chat.completions.create(model=model, messages=messages, tools=[CALCULATOR],
                                                 max_tokens=128).choices[0].message
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
    numbers = re.findall(r"-?\d+", answer.replace(",", ""))
    print(f"answer: {answer}")
    print(f"AGENTR1_REWARD={float(bool(numbers) and int(numbers[-1]) == task['answer'])}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """The driver: one subprocess (and one session) per task."""
    from agentr1.sdk import configure, run_command

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gateway", help="the gateway's URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", help="model name (default: the one the gateway serves)")
    parser.add_argument("--limit", type=int, default=len(TASKS), help="how many tasks to run")
    parser.add_argument("--run-id", help="run the sessions belong to (default: the gateway's default run)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a run is killed")
    args = parser.parse_args(argv)
    configure(args.gateway)
    env = {"OPENAI_MODEL": args.model} if args.model else {}
    if not args.model:
        import httpx

        env["OPENAI_MODEL"] = str(httpx.get(f"{args.gateway}/v1/models", timeout=30).json()["data"][0]["id"])
    results = {}
    for task in TASKS[: args.limit]:
        result = run_command([sys.executable, __file__], task, run_id=args.run_id, group_id=task["id"], env=env,
                             timeout_s=args.timeout)
        results[task["id"]] = result
        print(f"{task['id']}: session {result.session_id} exit {result.exit_code} reward {result.reward}")
    return results


if __name__ == "__main__":
    agent() if "AGENTR1_TASK" in os.environ else main()
