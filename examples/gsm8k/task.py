"""The GSM8K task: its prompt, the calculator tool, answer extraction and the exact-match reward.

Shared by both ways of running it (the Agent-R1 ToolEnv rows of ``prepare.py`` and the OpenAI-SDK
agent of ``agent.py``), so the model sees the same messages and tools either way.
"""

from __future__ import annotations

import ast
import operator
import re
from typing import Any

from agentr1.envs import BaseTool, ToolResult

SYSTEM = ("You are a careful math tutor. Solve the problem step by step. You may call the calculator tool "
          "for arithmetic. End your reply with the final answer on its own line as '#### <number>'.")
CALCULATOR_PATH = "examples.gsm8k.task:Calculator"  # how dataset rows name the tool (env_kwargs.tools)
SCORER_PATH = "examples.gsm8k.task:exact_match"  # how dataset rows name the scorer (reward_model.scorer)

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
MAX_EXPONENT = 64  # 9**9**9 would hang the tool: refuse big powers instead
MAX_EXPRESSION_CHARS = 200


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent {right} is too large (at most {MAX_EXPONENT})")
        return _BINARY[type(node.op)](left, right)
    raise ValueError("only numbers, + - * / // % ** and parentheses are allowed")


def calculate(expression: str) -> str:
    """The calculator's answer to ``expression``, or an ``error: ...`` line the model can read."""
    text = (expression or "").replace(",", "").replace("x", "*").replace("\u00d7", "*").strip()
    if not text or len(text) > MAX_EXPRESSION_CHARS:
        return f"error: give an arithmetic expression of 1 to {MAX_EXPRESSION_CHARS} characters"
    try:
        value = _evaluate(ast.parse(text, mode="eval").body)
    except ZeroDivisionError:
        return "error: division by zero"
    except (SyntaxError, ValueError, OverflowError) as exc:
        return f"error: {exc}"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(round(value, 6) if isinstance(value, float) else value)


class Calculator(BaseTool):
    name = "calculator"
    description = "Evaluate an arithmetic expression with + - * / and parentheses, e.g. '48/2 + 3*4'."
    parameters = {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(content=calculate(str(arguments["expression"])))


def ground_truth(solution: str) -> str:
    """GSM8K's answer: the number after ``####`` on the solution's last line, commas removed."""
    match = re.search(r"####\s*(-?[\d,]*\.?\d+)\s*$", solution.strip())
    if match is None:
        raise ValueError(f"GSM8K solution without a '#### <number>' line: {solution[-80:]!r}")
    return match.group(1).replace(",", "")


def extract_answer(text: str) -> str | None:
    """The model's final answer: the number after its last ``####``, else the last number it wrote."""
    cleaned = (text or "").replace(",", "").replace("$", "")
    marked = re.findall(r"####\s*(-?\d*\.?\d+)", cleaned)
    numbers = marked or re.findall(r"-?\d*\.?\d+", cleaned)
    return numbers[-1] if numbers else None


def exact_match(solution_str: str, ground_truth: Any) -> float:
    """1.0 when the extracted answer equals the ground truth as a number (72 == 72.0), else 0.0."""
    answer = extract_answer(solution_str)
    if answer is None:
        return 0.0
    try:
        return float(abs(float(answer) - float(ground_truth)) < 1e-6)
    except (TypeError, ValueError):
        return 0.0


def messages_for(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
