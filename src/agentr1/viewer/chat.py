"""Chat with the policy through a gateway: one session per conversation, one recorded step per model
call. Used by ``agentr1 chat`` and the viewer's chat page. Needs only httpx (the base install).

Tools named in ``tools`` are offered to the model and executed here, locally; each tool result
goes back to the model in the next call (another step of the same session).
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable
from typing import Any

import httpx

CALCULATOR_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression with + - * / ** % and parentheses.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}

_OPS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.USub: operator.neg, ast.UAdd: operator.pos,
}


def calculator(expression: str) -> str:
    """Arithmetic only (parsed, never eval'd); errors come back as text for the model to read."""

    def value(node: ast.AST) -> float | int:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ValueError("exponent too large")
            return _OPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.operand))
        raise ValueError("only numbers and + - * / // % ** ( ) are allowed")

    try:
        result = value(ast.parse(str(expression).strip(), mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, TypeError) as exc:
        return f"error: {exc}"
    if isinstance(result, float) and result.is_integer():
        result = int(result)
    return str(result)


TOOLS: dict[str, tuple[dict[str, Any], Callable[[dict[str, Any]], str]]] = {
    "calculator": (CALCULATOR_TOOL, lambda args: calculator(str(args.get("expression", "")))),
}


def run_tool(name: str, arguments: str) -> str:
    if name not in TOOLS:
        return f"error: unknown tool {name!r}"
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        return f"error: arguments are not JSON: {exc}"
    return TOOLS[name][1](args if isinstance(args, dict) else {})


class ChatError(RuntimeError):
    pass


def _check(response: httpx.Response) -> dict[str, Any]:
    if response.status_code >= 400:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text[:300]
        raise ChatError(f"{response.request.method} {response.request.url.path}: {response.status_code} {message}")
    return response.json()


class GatewayChat:
    """A conversation (or several, one after another) with the policy behind ``gateway_url``."""

    def __init__(self, gateway_url: str, *, model: str | None = None, tools: list[str] | tuple[str, ...] = (),
                 run_id: str = "chat", system: str | None = None, max_tokens: int = 256, temperature: float = 0.7,
                 max_tool_rounds: int = 4, client: httpx.Client | None = None) -> None:
        unknown = [t for t in tools if t not in TOOLS]
        if unknown:
            raise ValueError(f"unknown tools {unknown}; available: {sorted(TOOLS)}")
        self.gateway_url = gateway_url.rstrip("/")
        self.tools = list(tools)
        self.run_id = run_id
        self.system = system
        self.max_tokens, self.temperature, self.max_tool_rounds = max_tokens, temperature, max_tool_rounds
        self.client = client or httpx.Client(timeout=httpx.Timeout(600.0, connect=10.0))
        self._model = model
        self.session_id: str | None = None
        self.api_key: str | None = None
        self.messages: list[dict[str, Any]] = []

    @property
    def model(self) -> str:
        if self._model is None:
            models = _check(self.client.get(f"{self.gateway_url}/v1/models"))
            self._model = str(models["data"][0]["id"]) if models.get("data") else "policy"
        return self._model

    def new_session(self, task_id: str = "chat") -> str:
        """Start a new conversation in a new session; returns the session id."""
        body = {"run_id": self.run_id, "task_id": task_id, "metadata": {"source": "agentr1 chat"}}
        created = _check(self.client.post(f"{self.gateway_url}/sessions", json=body))
        self.session_id, self.api_key = created["id"], created.get("api_key")
        self.messages = [{"role": "system", "content": self.system}] if self.system else []
        return str(created["id"])

    def finish(self, status: str = "finished") -> None:
        if self.session_id is None:
            return
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            self.client.post(f"{self.gateway_url}/sessions/{self.session_id}/finish", json={"status": status},
                             headers=headers)
        except httpx.HTTPError:
            pass
        self.session_id = None

    def send(self, text: str, on_message: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
        """A user turn: the model's replies and tool results it led to (also kept in ``messages``)."""
        if self.session_id is None:
            self.new_session()
        self.messages.append({"role": "user", "content": text})
        added, _ = self.turn(self.session_id or "", self.messages, self.api_key, on_message=on_message)
        self.messages.extend(added)
        return added

    def turn(self, session_id: str, messages: list[dict[str, Any]], api_key: str | None = None, *,
             on_message: Callable[[dict[str, Any]], None] | None = None) -> tuple[list[dict[str, Any]], list[int]]:
        """Call the model on ``messages`` (not modified); run tool calls and call again, up to
        ``max_tool_rounds`` times. Returns the new messages and the step indices recorded."""
        url = f"{self.gateway_url}/sessions/{session_id}/v1/chat/completions"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        history: list[dict[str, Any]] = list(messages)
        added: list[dict[str, Any]] = []
        steps: list[int] = []
        for _ in range(self.max_tool_rounds + 1):
            body: dict[str, Any] = {"model": self.model, "messages": history, "max_tokens": self.max_tokens,
                                    "temperature": self.temperature}
            if self.tools:
                body["tools"] = [TOOLS[t][0] for t in self.tools]
            reply = _check(self.client.post(url, json=body, headers=headers))
            steps.extend((reply.get("agentr1") or {}).get("steps") or [])
            message = {k: v for k, v in reply["choices"][0]["message"].items() if v is not None and k != "refusal"}
            history.append(message)
            added.append(message)
            if on_message:
                on_message(message)
            calls = message.get("tool_calls") or []
            if not calls:
                break
            for call in calls:
                fn = call.get("function") or {}
                result = {"role": "tool", "tool_call_id": call.get("id", ""),
                          "content": run_tool(fn.get("name", ""), fn.get("arguments", ""))}
                history.append(result)
                added.append(result)
                if on_message:
                    on_message(result)
        return added, steps

    def close(self) -> None:
        self.finish()
        self.client.close()
