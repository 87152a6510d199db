"""GSM8K with the calculator as a multi-turn tool task: rows for ``data.generator``, and the environment
the expert demonstrations are replayed in.

- Training rows come from all 7,473 GSM8K training problems (``data/train_full.jsonl.gz``, a compressed
  byte-identical copy of the official ``train.jsonl``), minus any whose question text also occurs in
  a held-out file: the held-out sets are disjoint from training by construction, not by luck.
- Held-out rows come from GSM8K's official test split (1,319 problems), in file order, for evaluation only, in two
  disjoint index ranges: "val" the first 200 (``data/test.jsonl``, the recipe's held-out set since it began: for
  choosing settings), "test" the other 1,119 (``data/test_rest.jsonl.gz``: for claims).
- A row is the recipe's Agent-R1 row (:func:`examples.gsm8k.prepare.agent_r1_row`: system prompt, the
  question, the calculator tool, exact match of ``#### N``) with room for one calculator call per step
  of a GSM8K solution (at most 9 annotated steps in the training set) and a final answer.
"""

from __future__ import annotations

import gzip
import json
import random
from functools import lru_cache
from pathlib import Path
from typing import Any

from examples.gsm8k.prepare import agent_r1_row
from examples.gsm8k.task import Calculator, exact_match, messages_for

from agentr1.envs import StepResult, ToolEnv

__all__ = ["MAX_STEPS", "SAMPLING", "VAL_PROBLEMS", "ScoredCalculatorEnv", "load_split", "make_tasks", "normalized",
           "train_order", "train_row"]

DATA = Path(__file__).parent / "data"
MAX_STEPS = 10  # one call per annotated step (at most 9 in GSM8K's training set) and the answer
SAMPLING = {"temperature": 1.0, "max_tokens": 160}  # one step of a solution and a call fit easily


def normalized(question: str) -> str:
    """The question text compared for overlap: case and whitespace do not count."""
    return " ".join(question.lower().split())


VAL_PROBLEMS = 200  # the official test split's first problems, data/test.jsonl; data/test_rest.jsonl.gz the others


@lru_cache(maxsize=3)
def load_split(split: str) -> tuple[dict[str, str], ...]:
    """"train": the full training set without held-out questions; "val": the official test split's first 200
    problems; "test": its other 1,119."""
    if split == "val":
        with (DATA / "test.jsonl").open(encoding="utf-8") as fh:
            return tuple(json.loads(line) for line in fh if line.strip())
    if split == "test":
        with gzip.open(DATA / "test_rest.jsonl.gz", "rt", encoding="utf-8") as fh:
            return tuple(json.loads(line) for line in fh if line.strip())
    if split != "train":
        raise ValueError(f"split must be 'train', 'val' or 'test', not {split!r}")
    held_out = {normalized(r["question"]) for r in load_split("val") + load_split("test")}
    with gzip.open(DATA / "train_full.jsonl.gz", "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    return tuple(r for r in records if normalized(r["question"]) not in held_out)


def make_tasks(split: str, n: int, seed: int, max_steps: int = MAX_STEPS) -> list[dict[str, Any]]:
    """``n`` rows: "train" in a seeded order (cycling when ``n`` exceeds the set); "val" and "test" their first
    ``n`` problems (at most 200 and 1,119) in file order, whatever the seed, with the id and index each has in the
    official test split (``test-<i>``)."""
    if split not in ("train", "val", "test"):
        raise ValueError(f"split must be 'train', 'val' or 'test', not {split!r}")
    if split != "train":
        records = load_split(split)
        if n > len(records):
            raise ValueError(f"there are {len(records)} {split} problems, asked for {n}")
        first = 0 if split == "val" else VAL_PROBLEMS
        return [agent_r1_row(r, "test", first + i, sampling=SAMPLING, max_steps=max_steps) for i, r in enumerate(records[:n])]
    order = train_order(seed)
    return [train_row(order[k % len(order)], max_steps=max_steps, repeat=k // len(order)) for k in range(n)]


def train_order(seed: int) -> list[int]:
    """The training problems' indices (into ``load_split("train")``) in the seeded order of ``make_tasks``."""
    order = list(range(len(load_split("train"))))
    random.Random(seed).shuffle(order)
    return order


def train_row(i: int, *, max_steps: int = MAX_STEPS, repeat: int = 0) -> dict[str, Any]:
    row = agent_r1_row(load_split("train")[i], "train", i, sampling=SAMPLING, max_steps=max_steps)
    return {**row, "id": f"train-{i}" + (f"-{repeat}" if repeat else "")}


class ScoredCalculatorEnv(ToolEnv):
    """The rows' conversation (their prompt and the calculator) as an environment that also scores the
    final answer with the rows' exact match, as a reward on the last step: what replayed demonstrations
    need for ``min_reward`` (RL rollouts get the same score from the row's ``reward_model``)."""

    def __init__(self, task: dict[str, Any]) -> None:
        if "answer" not in task:
            raise ValueError(f"task {task.get('id', '?')!r}: ScoredCalculatorEnv needs the ground truth as `answer`")
        prompt = task.get("prompt") or messages_for(task["extra_info"]["question"])
        super().__init__({**task, "prompt": prompt}, tools=[Calculator()])

    async def step(self, action: dict[str, Any]) -> StepResult:
        result = await super().step(action)
        if result.done:
            result.reward = exact_match(result.info.get("answer", ""), self.task["answer"])
        return result
