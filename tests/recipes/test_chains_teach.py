"""The chains tasks that RL must teach (issue 44): the flaky calculator of ``make_retry_tasks`` and the longer
held-out chains of ``make_length_tasks``. Disjointness of their splits: ``test_chains_tasks.py``."""

from __future__ import annotations

import asyncio

import pytest
from examples.chains.env import BUSY, ChainEnv, FlakyCalculator
from examples.chains.expert import expert_turns
from examples.chains.tasks import busy_call_of, generate_chains, make_length_tasks, make_retry_tasks, make_short_tasks


def _env_of(row: dict) -> ChainEnv:
    """The row's environment as ``run_task`` builds it (``env_kwargs`` minus the loop's keys)."""
    return ChainEnv(row, **{k: v for k, v in row["env_kwargs"].items() if k not in ("max_steps", "sampling")})


async def _play(env: ChainEnv, actions: list[dict]) -> tuple[list[str], bool]:
    """The calculator's answers to ``actions`` and whether the episode ended."""
    await env.reset()
    answers, done = [], False
    for action in actions:
        result = await env.step(action)
        answers += [str(call["content"]) for call in result.info.get("tool_calls", [])]
        done = result.done
    return answers, done


def test_the_flaky_calculator_answers_busy_at_its_calls_and_computes_otherwise():
    calculator = FlakyCalculator([1, 3])
    answers = [asyncio.run(calculator.execute({"expression": "12 * 3"})) for _ in range(5)]
    assert [a.content for a in answers] == ["36", BUSY, "36", BUSY, "36"]
    with pytest.raises(ValueError, match="busy_calls"):
        FlakyCalculator([-1])


def test_a_retry_task_fails_one_call_and_the_same_call_again_succeeds():
    rows = make_retry_tasks("val", 64, 1_000_003)
    assert {r["env_kwargs"]["busy_calls"][0] for r in rows} == {0, 1}  # each of the two calls fails in some chains
    for row in rows[:16]:
        busy = row["env_kwargs"]["busy_calls"][0]
        turns = expert_turns(row)  # the expert's clean run: one call per operation, then the answer
        answers, _ = asyncio.run(_play(_env_of(row), turns[:-1]))
        assert answers[busy] == BUSY and BUSY not in answers[:busy]  # the clean run meets the error
        retried = [*turns[:busy + 1], turns[busy], *turns[busy + 1:-1]]
        answers, _ = asyncio.run(_play(_env_of(row), retried))
        assert answers[-1] == str(row["answer"]) and answers.count(BUSY) == 1  # asking again gets through
        assert row["env_kwargs"]["max_steps"] == len(row["ops"]) + 3  # room for the retry and a spare call


def test_retry_tasks_are_the_short_chains_with_a_busy_call_fixed_per_chain():
    rows, short = make_retry_tasks("train", 32, 0), make_short_tasks("train", 32, 0)
    assert [r["prompt"] for r in rows] == [r["prompt"] for r in short]
    chains = generate_chains("train", 32, 0, min_ops=2, max_ops=2, digits=2)
    assert [r["env_kwargs"]["busy_calls"] for r in rows] == [[busy_call_of(c)] for c in chains]
    assert make_retry_tasks("train", 32, 0) == rows  # the same on every call and machine (sha256)


def test_the_plain_calculator_never_answers_busy():
    row = make_short_tasks("val", 1, 1_000_003)[0]
    answers, done = asyncio.run(_play(_env_of(row), expert_turns(row)))
    assert BUSY not in answers and done and answers[-1] == str(row["answer"])


def test_length_tasks_train_on_two_and_three_operations_and_hold_out_three():
    train, val = make_length_tasks("train", 200, 0), make_length_tasks("val", 128, 1_000_003)
    assert {len(r["ops"]) for r in train} == {2, 3} and {len(r["ops"]) for r in val} == {3}
    assert all(r["start"] < 100 and all(x < 100 for _, x in r["ops"]) for r in train + val)  # two-digit operands
    assert {len(r["ops"]) for r in make_length_tasks("val", 32, 5, val_ops=(2, 3))} == {2, 3}
