"""An OpenAI Agents SDK ``Agent`` with a calculator function tool, recorded by agentr1.

``use_gateway()`` makes the gateway the process's default OpenAI client, on the SDK's default
Responses API (and turns the Agents SDK's export of traces to OpenAI off); the agent stays as written.
Each ``@rollout`` call is one session.

    agentr1 gateway --model smollm2 --port 8000
    python examples/agents/openai_agents_sdk_agent.py http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import asyncio
import re
from typing import Any

import httpx
from agents import Agent, ModelSettings, Runner, function_tool

from agentr1.adapters.openai_agents import use_gateway
from agentr1.sdk import configure, rollout

INSTRUCTIONS = "You are a careful math assistant. Use the calculator tool, then give the final number."
TASKS = [{"id": "mul-12-7", "question": "What is 12*7?", "answer": 84},
         {"id": "add-35-48", "question": "What is 35+48?", "answer": 83},
         {"id": "sub-90-17", "question": "What is 90-17?", "answer": 73}]


@function_tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses."""
    if not re.fullmatch(r"[\d\s+\-*/().]+", expression or ""):
        return "error: only numbers and + - * / ( ) are allowed"
    try:
        return str(eval(expression, {"__builtins__": {}}, {}))  # arithmetic only, checked above
    except Exception as exc:
        return f"error: {exc}"


def build_agent(model: str) -> Agent:
    return Agent(name="calculator agent", instructions=INSTRUCTIONS, tools=[calculator], model=model,
                 model_settings=ModelSettings(max_tokens=128))


def score(answer: Any, task: dict[str, Any]) -> float:
    numbers = re.findall(r"-?\d+", str(answer or "").replace(",", ""))
    return float(bool(numbers) and int(numbers[-1]) == task["answer"])


@rollout(task_id=lambda task, **_: task["id"], group_id=lambda task, **_: task["id"],
         run_id=lambda task, **kw: kw.get("run_id"))
async def solve(task: dict[str, Any], *, agent: Agent, run_id: str | None = None) -> float:
    result = await Runner.run(agent, task["question"], max_turns=6)
    return score(result.final_output, task)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gateway", help="the gateway's URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", help="model name (default: the one the gateway serves)")
    parser.add_argument("--limit", type=int, default=len(TASKS), help="how many tasks to run")
    parser.add_argument("--run-id", help="run the sessions belong to (default: the gateway's default run)")
    args = parser.parse_args(argv)
    configure(args.gateway)
    use_gateway()
    agent = build_agent(args.model or str(httpx.get(f"{args.gateway}/v1/models", timeout=30).json()["data"][0]["id"]))

    async def run_all() -> dict[str, float]:
        return {task["id"]: await solve(task, agent=agent, run_id=args.run_id) for task in TASKS[: args.limit]}

    rewards = asyncio.run(run_all())
    for name, value in rewards.items():
        print(f"{name}: reward {value}")
    return rewards


if __name__ == "__main__":
    main()
