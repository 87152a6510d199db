"""Expert demonstrations from GSM8K's own solutions: each ``<<a*b=c>>`` annotation becomes a calculator call.

A GSM8K solution reads "Natalia sold 48/2 = <<48/2=24>>24 clips in May. ... #### 72". The expert speaks
the solution in turns, one per annotation: the text up to the annotation (its trailing "=" dropped) as
the message's content with a calculator call on the annotation's expression; the calculator's answer
comes back as the tool message, and the next turn carries on from the result ("24 clips in May. ...").
The last turn is the rest of the solution, ending with ``#### <answer>``.

A solution is *well-formed* for this when it has at least one annotation, every annotation is
``expression=result``, the calculator evaluates every expression, each value rounds to the annotated
result (at the annotation's precision: 10/3 -> 3.333333 matches "3.33"), and the solution ends with
``#### N``. :func:`solution_turns` raises :class:`MalformedSolution` (with the reason) otherwise.

    python -m agentr1.trainer.sft.replay examples.gsm8k.expert:demonstrations n=2000 \\
        --db out/gsm8k-tool/traces.db --run-id gsm8k-demos
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from examples.gsm8k.task import calculate, ground_truth
from examples.gsm8k.tool_task import ScoredCalculatorEnv, load_split, train_order, train_row

from agentr1.trainer.sft.replay import Demonstration

__all__ = ["Call", "MalformedSolution", "demonstrations", "result_matches", "solution_calls", "solution_turns"]

_ANNOTATION = re.compile(r"<<([^<>]*)>>")


class MalformedSolution(ValueError):
    """A solution whose annotations cannot be replayed as calculator calls (the message says why)."""


@dataclass(frozen=True)
class Call:
    before: str  # the solution's text since the previous annotation, up to this one
    expression: str
    annotated: str  # the result the annotation states


def result_matches(value: str, annotated: str) -> bool:
    """Whether the calculator's ``value`` is the ``annotated`` result, rounded to its decimals."""
    try:
        got, want = float(value), float(annotated.replace(",", "").rstrip("."))
    except ValueError:
        return False
    if abs(got - want) < 1e-6:
        return True
    decimals = len(annotated.split(".", 1)[1]) if "." in annotated.strip(".") else 0
    return decimals > 0 and abs(round(got, decimals) - want) < 1e-9  # an integer result is never a rounding


def solution_calls(solution: str) -> tuple[list[Call], str]:
    """The annotations of ``solution`` as calls, and the text after the last one (the final answer)."""
    calls, start = [], 0
    for match in _ANNOTATION.finditer(solution):
        expression, sep, annotated = match.group(1).rpartition("=")
        if not sep or not expression.strip() or not annotated.strip():
            raise MalformedSolution(f"annotation <<{match.group(1)}>> is not expression=result")
        calls.append(Call(solution[start:match.start()], expression.strip(), annotated.strip()))
        start = match.end()
    if not calls:
        raise MalformedSolution("the solution has no <<...>> annotation")
    return calls, solution[start:]


def _content(text: str) -> str | None:
    """The text of a turn before its call: without the "=" (or "= $") that led into the annotation."""
    cleaned = re.sub(r"[\s=$]+$", "", text).strip()
    return cleaned or None


def solution_turns(solution: str) -> list[dict[str, Any]]:
    """The expert's assistant messages for ``solution`` (see the module docstring)."""
    calls, tail = solution_calls(solution)
    try:
        label = ground_truth(solution)
    except ValueError as exc:
        raise MalformedSolution(f"the solution does not end with '#### <number>': {solution[-60:]!r}") from exc
    turns: list[dict[str, Any]] = []
    for k, call in enumerate(calls):
        value = calculate(call.expression)
        if not result_matches(value, call.annotated):
            raise MalformedSolution(f"calculator({call.expression!r}) = {value!r}, the annotation says {call.annotated!r}")
        function = {"name": "calculator", "arguments": json.dumps({"expression": call.expression})}
        turns.append({"role": "assistant", "content": _content(call.before),
                      "tool_calls": [{"id": f"call_{k}", "type": "function", "function": function}]})
    final = tail.strip()
    stated = re.search(r"####\s*(\S+)$", final)
    if stated is None or stated.group(1).replace(",", "") != label:
        raise MalformedSolution(f"the solution's tail does not end with '#### {label}': {final[-60:]!r}")
    turns.append({"role": "assistant", "content": final})
    return turns


def demonstrations(n: int, seed: int = 0) -> list[Demonstration]:
    """Demonstrations of the first ``n`` well-formed training problems in ``make_tasks("train", ..., seed)``'s
    order (malformed solutions are passed over); only training problems, never a test question."""
    out = []
    records = load_split("train")
    for i in train_order(seed):
        if len(out) >= n:
            break
        try:
            turns = solution_turns(records[i]["answer"])
        except MalformedSolution:
            continue
        row = train_row(i)
        task = {**row, "answer": row["reward_model"]["ground_truth"]}
        out.append(Demonstration(task_id=row["id"], env=ScoredCalculatorEnv(task), actions=turns,
                                 group_id=f"demo/{row['id']}", metadata={"question": records[i]["question"]}))
    return out
