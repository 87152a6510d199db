"""The main job on the embedded default: serve SmolLM2 through the agentr1 gateway, run an
unmodified OpenAI-client calculator agent on arithmetic tasks, reward each trajectory, and
show the recorded step traces.

    scripts/demo            # installs what it needs, then runs this
    .venv/bin/python examples/quickstart.py --tasks 4 --samples 2
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path

import httpx
import openai

from agentr1.gateway.app import create_app
from agentr1.gateway.server import BackgroundServer
from agentr1.gateway.settings import GatewaySettings
from agentr1.store import TraceStore

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}
SYSTEM = "You are a careful assistant. Use the calculator tool for arithmetic, then give the final number."


def calculator(expression: str) -> str:
    if not re.fullmatch(r"[\d\s+\-*/().]+", expression or ""):
        return "error: only numbers and + - * / ( ) are allowed"
    try:
        return str(eval(expression, {"__builtins__": {}}, {}))
    except Exception as exc:
        return f"error: {exc}"


def run_agent(client: openai.OpenAI, model: str, question: str, max_turns: int = 3) -> str:
    """A plain OpenAI tool-calling loop: this is 'the agent you already have'."""
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    answer = ""
    for _ in range(max_turns):
        reply = client.chat.completions.create(model=model, messages=messages, tools=[CALCULATOR],
                                               max_tokens=96, temperature=0.8)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        answer = message.content or ""
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            try:
                args = json.loads(call.function.arguments)
            except json.JSONDecodeError:
                args = {}
            result = calculator(str(args.get("expression", "")))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--db", default="sqlite:///out/quickstart.db")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--samples", type=int, default=2, help="trajectories per task (a GRPO group)")
    args = parser.parse_args()
    Path("out").mkdir(exist_ok=True)

    print(f"==> starting the gateway with model {args.model} (the first run converts SmolLM2, ~30 s)")
    server = BackgroundServer(create_app(GatewaySettings(model=args.model, db=args.db, accept_any_model=True)))
    gateway = server.start()
    print(f"==> gateway ready on {gateway}")

    rng = random.Random(0)
    run_id = f"quickstart-{int(time.time())}"
    solved = 0
    for t in range(args.tasks):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        question, truth = f"What is {a} * {b}?", a * b
        for k in range(args.samples):
            session = httpx.post(f"{gateway}/sessions", json={"run_id": run_id, "task_id": f"mul-{t}",
                                                              "group_id": f"mul-{t}"}).json()
            client = openai.OpenAI(base_url=session["base_url"], api_key=session["api_key"])
            started = time.monotonic()
            answer = run_agent(client, "policy", question)
            numbers = re.findall(r"-?\d+", answer.replace(",", ""))
            reward = float(bool(numbers) and int(numbers[-1]) == truth)
            solved += int(reward)
            httpx.post(f"{gateway}/sessions/{session['id']}/finish", json={"reward": reward})
            print(f"task {t} sample {k}: {question} -> {answer.strip()[:60]!r} reward={reward} "
                  f"({time.monotonic() - started:.1f}s)")

    server.stop()
    with TraceStore.open(args.db) as store:
        run = store.get_run(run_id)
        print(f"\n==> run {run_id}: {run.n_sessions} sessions, {run.n_steps} steps recorded, "
              f"solved {solved}/{args.tasks * args.samples}")
        first = store.list_sessions(run_id, limit=1)[0]
        trace = store.get_session(first.id)
        for step in trace.steps:
            print(f"  step {step.index}: {len(step.observation_ids)} observation ids, {len(step.action_ids)} action "
                  f"ids, logprobs {len(step.action_logprobs or [])}, finish={step.finish_reason}, drift={step.drift}")
    print(f"\nInspect: .venv/bin/agentr1 traces sessions --db {args.db} --run {run_id}")
    print(f"         .venv/bin/agentr1 traces show {first.id} --db {args.db}")


if __name__ == "__main__":
    main()
