"""No training, just the recording: serve SmolLM2 through the agentr1 gateway, run the
calculator agent (a plain OpenAI-client tool loop) on arithmetic tasks inside SDK sessions,
reward each trajectory, and show the recorded step traces.

    .venv/bin/python examples/quickstart.py --tasks 4 --samples 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from calculator.calculator import final_number, make_tasks, solve

from agentr1.gateway import EmbeddedGateway, GatewaySettings
from agentr1.sdk import configure, reward, session
from agentr1.store import TraceStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--db", default="sqlite:///out/quickstart.db")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--samples", type=int, default=2, help="trajectories per task (a GRPO group)")
    args = parser.parse_args()
    Path("out").mkdir(exist_ok=True)

    print(f"==> starting the gateway with model {args.model} (the first run converts SmolLM2, ~30 s)")
    gateway = EmbeddedGateway(GatewaySettings(model=args.model, db=args.db, accept_any_model=True)).start()
    configure(gateway.url)
    print("==> gateway ready")

    run_id = f"quickstart-{int(time.time())}"
    solved = 0
    for task in make_tasks("train", args.tasks, seed=0):
        for k in range(args.samples):
            started = time.monotonic()
            with session(run_id=run_id, task_id=task["id"], group_id=task["id"]):
                answer = solve(task)  # the agent: a plain OpenAI tool-calling loop
                value = final_number(answer)
                score = float(value is not None and value == task["answer"])
                reward(score)
            solved += int(score)
            print(f"{task['question']} (sample {k}) -> {answer.strip()[:60]!r} reward={score} "
                  f"({time.monotonic() - started:.1f}s)")

    gateway.stop()
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
