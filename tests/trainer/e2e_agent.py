"""A real agent and a reward for the end-to-end training tests (imported by `module:function`)."""

from __future__ import annotations

from agentr1.sdk import openai_client


def make_tasks(split: str, n: int, seed: int) -> list[dict]:
    return [{"id": f"{split}-{seed}-{i}", "question": f"Say something about the number {i}."} for i in range(n)]


def solve(task: dict) -> str:
    """Two model calls: a question, then a follow-up on the model's own answer."""
    client = openai_client()
    messages = [{"role": "user", "content": task["question"]}]
    reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=8, temperature=1.0)
    messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "And then?"}]
    final = client.chat.completions.create(model="policy", messages=messages, max_tokens=8, temperature=1.0)
    return final.choices[0].message.content or ""


def token_reward(session, task) -> float:
    """Varies across samples of one task (so group advantages are not all zero): the share of the
    final action's tokens whose id is even."""
    ids = session.steps[-1].action_ids if session.steps else []
    return sum(i % 2 == 0 for i in ids) / max(1, len(ids))


def solve_noting_the_process(task: dict) -> str:
    """``solve``, leaving a file named after the task and this process's pid in $AGENTR1_TEST_PIDS (the
    tests of ``agent.processes`` read where each session ran); a task whose id ends in "-exit" ends this
    process instead (a worker that dies mid-session)."""
    import os
    from pathlib import Path

    if task["id"].endswith("-exit"):
        os._exit(3)
    answer = solve(task)
    (Path(os.environ["AGENTR1_TEST_PIDS"]) / f"{task['id']}.{os.getpid()}").touch()
    return answer


def solve_meeting_the_others(task: dict) -> str:
    """``solve`` once every session of the test is running at the same time: each leaves a file in
    $AGENTR1_TEST_PIDS and waits (20 s at most) until there are $AGENTR1_TEST_MEET of them; a session that
    waited in vain answers "alone" instead of calling the model."""
    import os
    import threading
    import time
    from pathlib import Path

    folder, expected = Path(os.environ["AGENTR1_TEST_PIDS"]), int(os.environ["AGENTR1_TEST_MEET"])
    (folder / f"{task['id']}-{threading.get_ident()}.{os.getpid()}").touch()  # the samples of a task meet too
    deadline = time.monotonic() + 20.0
    while sum(1 for _ in folder.iterdir()) < expected:
        if time.monotonic() > deadline:
            return "alone"
        time.sleep(0.01)
    return solve(task)


def solve_reporting_the_switch_interval(task: dict) -> float:
    """``solve``, then the GIL switch interval of the process running it, in milliseconds (the session's reward)."""
    import sys

    solve(task)
    return sys.getswitchinterval() * 1000


def solve_reporting_the_heap(task: dict) -> float:
    """``solve``, then 1.0 (the session's reward) if the heap of the process running it is frozen
    (``agentr1.core.heap``: no full collection of the process's long-lived objects mid-rollout), else 0.0."""
    import gc

    solve(task)
    return 1.0 if gc.get_freeze_count() > 0 else 0.0


def solve_seeded(task: dict) -> str:
    """``solve`` with a fixed seed on every call (an agent that asks for reproducible sampling)."""
    client = openai_client()
    messages = [{"role": "user", "content": task["question"]}]
    reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=8, temperature=1.0, seed=11)
    return reply.choices[0].message.content or ""


def chains_with_forced_calls(split: str, n: int, seed: int, **demo_kwargs: float) -> list[dict]:
    """The laptop demo's chains (``examples.chains.tasks.make_demo_tasks``), every other one with each of its calls
    forced to be a calculator call (``tool_choice`` required, 3 steps): episodes of several calls, each prompt
    extending the one before, even from a model that never calls a tool by itself."""
    from examples.chains.tasks import make_demo_tasks

    rows = make_demo_tasks(split, n, seed, **demo_kwargs)
    for row in rows[::2]:
        row["env_kwargs"]["sampling"]["tool_choice"] = "required"
        row["env_kwargs"]["max_steps"] = 3
    return rows
