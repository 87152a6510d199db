"""The recipes' agents and environments through a real gateway whose backend replies from a script
(SmolLM2's real tokenizer and renderer): multi-turn flows, the context each session's model saw, and
the rewards stored for them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

from examples.alfworld.data import load_index
from examples.alfworld.data import make_tasks as alfworld_rows
from examples.alfworld.game import INVALID
from examples.hotpotqa.agent import solve
from examples.hotpotqa.data import make_tasks as hotpot_tasks
from examples.hotpotqa.rewards import exact_match_reward, f1_reward

from agentr1.envs import run_task
from agentr1.sdk import session


def _tool_call(query: str) -> str:
    return f'<tool_call>\n{json.dumps({"name": "search", "arguments": {"query": query}})}\n</tool_call>'


def _script(replies: list[str]):
    it: Iterator[str] = iter(replies)
    return lambda prompt: next(it)


def test_hotpotqa_agent_searches_answers_and_its_window_slides(tmp_path, scripted_gateway):
    task = hotpot_tasks("val", 1, 0)[0]  # the Tinted Windows question, answer Tulsa
    replies = [_tool_call("Tinted Windows album"), _tool_call("Tinted Windows band first performance"), "Answer: Tulsa"]

    async def go() -> str:
        context = {"policy": "sliding_window", "keep_last_turns": 1}
        async with session(task_id=task["id"], metadata={"context": context}) as active:
            await asyncio.to_thread(solve, task)
            return active.id

    with scripted_gateway(tmp_path / "hotpot.db", _script(replies)) as (_, store):
        record = store.get_session(asyncio.run(go()))
    steps = record.steps
    assert [len(s.action.get("tool_calls") or []) for s in steps] == [1, 1, 0]
    tool_result = steps[1].messages_sent[3]
    assert tool_result["role"] == "tool" and tool_result["content"].startswith("[Tinted Windows (album)]")
    # the window: the system prompt and question, then only the last turn (the second search and its result)
    assert len(steps[2].messages_sent) == 6 and len(steps[2].messages_seen) == 4
    assert steps[2].messages_seen[:2] == steps[2].messages_sent[:2]
    assert "Tinted Windows (band)" in steps[2].messages_seen[3]["content"]
    assert exact_match_reward(record, task) == 1.0 and f1_reward(record, task) == 1.0


def test_alfworld_rows_run_through_run_task_with_success_and_penalties(tmp_path, scripted_gateway):
    row = alfworld_rows("val", 1, 0)[0]
    walkthrough = next(e["walkthrough"] for e in load_index() if e["gamefile"] == row["env_kwargs"]["gamefile"])

    async def go() -> tuple[str, object]:
        async with session(task_id=row["id"]) as active:
            return active.id, await run_task(row)

    with scripted_gateway(tmp_path / "alfworld.db", _script(["dance a little", *walkthrough])) as (_, store):
        session_id, returned = asyncio.run(go())
        record = store.get_session(session_id)
    assert returned is None  # the row has no reward_model: the environment reported the rewards itself
    assert [s.action["content"] for s in record.steps] == ["dance a little", *walkthrough]
    assert [s.reward for s in record.steps] == [-0.1] + [0.0] * len(walkthrough)
    assert record.reward == 1.0 and [(r.name, r.source, r.step_index) for r in record.rewards
                                     if r.step_index is None] == [("success", "environment", None)]
    assert INVALID in record.steps[1].messages_seen[-1]["content"]
