"""The chains expert: one correct calculator call per step, then the result; demonstrations for SFT.

The expert's turns are what a competent policy would say in :class:`~examples.chains.env.ChainEnv`:
``calculator("47 * 23")``, read ``1081``, ``calculator("1081 - 318")``, ... and finally
``"The result is 1668."``. :func:`demonstrations` wraps them for
``agentr1.trainer.sft.replay``, which replays them through a real gateway as SmolLM2's own tokens:

    python -m agentr1.trainer.sft.replay examples.chains.expert:demonstrations n=64 \\
        --db out/chains/traces.db --run-id chains-demos

Demonstrations come from the training split only (``tasks.py`` keeps the splits disjoint), from a
seed of their own, so they are not the RL training tasks either.
"""

from __future__ import annotations

import json
from typing import Any

from examples.chains.env import ChainEnv
from examples.chains.tasks import generate_chains, task_row

from agentr1.trainer.sft.replay import Demonstration

__all__ = ["DEMO_SEED", "demonstrations", "expert_turns"]

DEMO_SEED = 7_000_001  # not a seed the trainer gives its task generators (data.seed, + 1_000_003 for val)
SIZES = {"full": {}, "short": {"min_ops": 2, "max_ops": 2, "digits": 2}}  # make_tasks / make_short_tasks


def expert_turns(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The expert's assistant messages for a chain row: one calculator call per step, then the result."""
    turns: list[dict[str, Any]] = []
    for i, (left, op, right, _result) in enumerate(task["steps"]):
        arguments = json.dumps({"expression": f"{left} {op} {right}"})
        turns.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": "calculator", "arguments": arguments}}]})
    turns.append({"role": "assistant", "content": f"The result is {task['answer']}."})
    return turns


def demonstrations(n: int, *, seed: int = DEMO_SEED, size: str = "full") -> list[Demonstration]:
    """Expert demonstrations of ``n`` training chains (``size``: ``full`` as ``make_tasks``, ``short``
    as ``make_short_tasks``)."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    rows = [task_row(c, f"demo-{i}") for i, c in enumerate(generate_chains("train", n, seed, **SIZES[size]))]
    return [Demonstration(task_id=row["id"], env=ChainEnv(row, score_final_step=True), actions=expert_turns(row),
                          group_id=f"demo/{row['id']}", metadata={"question": row["prompt"][-1]["content"]})
            for row in rows]
