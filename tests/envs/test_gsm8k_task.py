"""The GSM8K recipe's pieces without a model: the calculator, ground truth and answer extraction,
the exact-match reward, and the Agent-R1 rows ``prepare.py`` writes."""

from __future__ import annotations

import asyncio

import pyarrow.parquet as pq
import pytest
from examples.gsm8k.prepare import prepare
from examples.gsm8k.task import Calculator, calculate, exact_match, extract_answer, ground_truth


@pytest.mark.parametrize(("expression", "expected"), [
    ("48/2", "24"), ("48 + 48/2", "72"), ("(1+2)*3.5", "10.5"), ("1,000 * 3", "3000"), ("3 x 4", "12"),
    ("-2**3", "-8"), ("10/4", "2.5"),
    ("1/0", "error: division by zero"),
    ("9**9**9", "error: exponent 387420489 is too large (at most 64)"),
    ("__import__('os')", "error: only numbers, + - * / // % ** and parentheses are allowed"),
    ("", "error: give an arithmetic expression of 1 to 200 characters"),
    ("1+", "error: "),
])
def test_calculator(expression, expected):
    assert calculate(expression).startswith(expected)
    if not expected.startswith("error"):
        assert calculate(expression) == expected


def test_calculator_tool_wraps_it():
    result = asyncio.run(Calculator().execute({"expression": "6*7"}))
    assert (result.content, result.reward) == ("42", None)


def test_ground_truth_and_extraction():
    assert ground_truth("She sold 48/2 = <<48/2=24>>24.\n#### 1,072") == "1072"
    with pytest.raises(ValueError, match="without a '#### <number>' line"):
        ground_truth("no final line")
    assert extract_answer("So 3 then 5.\n#### 72") == "72"
    assert extract_answer("It costs $1,250 in total") == "1250"
    assert extract_answer("no numbers") is None
    assert exact_match("#### 72.0", "72") == 1.0
    assert exact_match("#### 71", "72") == 0.0
    assert exact_match("I think 72 apples, #### 70", "72") == 0.0  # the marked answer wins
    assert exact_match("", "72") == 0.0


def test_prepare_writes_agent_r1_rows(tmp_path):
    files = prepare(tmp_path, limit=3)
    rows = pq.read_table(files["test"]).to_pylist()
    assert len(rows) == 3
    row = rows[0]
    assert row["agent_name"] == "tool_env"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["reward_model"] == {"style": "rule", "ground_truth": ground_truth_of_first_test(),
                                   "scorer": "examples.gsm8k.task:exact_match"}
    assert row["env_kwargs"]["tools"] == ["examples.gsm8k.task:Calculator"]
    # train.yaml's test files: the official test problems after the 200 of its val files, ids and indices unique
    assert [r["id"] for r in pq.read_table(files["test_rest"]).to_pylist()] == ["test-200", "test-201", "test-202"]
    assert [r["id"] for r in rows] == ["test-0", "test-1", "test-2"]


def ground_truth_of_first_test() -> str:
    from examples.gsm8k.prepare import DATA, read_jsonl

    return ground_truth(read_jsonl(DATA / "test.jsonl")[0]["answer"])
