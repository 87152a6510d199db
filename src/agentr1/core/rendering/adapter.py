"""A ``renderers`` (PyPI) renderer behind our :class:`Renderer` protocol.

``renderers`` hand-codes the chat formats of many model families (Qwen3/3.5, GLM, DeepSeek, Kimi,
gpt-oss, Llama 3, Gemma 4, Nemotron, MiniMax, ...) with id-level parsers and ``bridge_to_next_turn``.
Where it supports the policy model, this adapter lets the gateway use it: ``renders`` go through
``render_ids``, ``parse`` through ``parse_response``, and the bridge's tail through
``bridge_to_next_turn`` (verified to extend the previous ids exactly; otherwise no tail, and the
caller renders afresh). The package is imported only here, on use: it is not needed for SmolLM2,
whose tags it cannot parse (see docs/rendering.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentr1.core.rendering.base import (
    Message,
    ParsedAction,
    RenderError,
    Tool,
    TurnClose,
    new_call_id,
    template_messages,
    tool_choice_name,
    tool_functions,
)

__all__ = ["RenderersAdapter"]


class RenderersAdapter:
    """Wraps ``inner`` (a ``renderers.Renderer``), or the one ``renderers.create_renderer(tokenizer,
    config)`` picks (by the tokenizer's model name; ``config`` a ``renderers`` renderer config)."""

    def __init__(self, tokenizer: Any, inner: Any = None, *, config: Any = None) -> None:
        if inner is None:
            import renderers

            inner = renderers.create_renderer(tokenizer, config)
        self.inner = inner
        self.tokenizer = tokenizer
        stops = [int(t) for t in inner.get_stop_token_ids()]
        if not stops:
            raise RenderError("the renderer reports no stop tokens: it cannot close a turn")
        self.end_of_turn_ids: tuple[int, ...] = tuple(stops)
        self.close_id = stops[0]

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []

    def render(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None, *,
               add_generation_prompt: bool = True, prefill: str = "") -> list[int]:
        tool_functions(tools)
        if prefill and not add_generation_prompt:
            raise RenderError("prefill needs add_generation_prompt")
        ids = self.inner.render_ids(template_messages(messages), tools=list(tools) if tools else None,
                                    add_generation_prompt=add_generation_prompt)
        return [*ids, *self._encode(prefill)]

    def close_turn(self, action_ids: Sequence[int]) -> TurnClose:
        for i, tid in enumerate(action_ids):
            if tid in self.end_of_turn_ids:
                return TurnClose(kept=i + 1)
        return TurnClose(kept=len(action_ids), appended=(self.close_id,))

    def render_tail(self, messages: Sequence[Message], n_history: int, tools: Sequence[Tool] | None, *,
                    prefill: str = "", prompt_ids: Sequence[int] = (),
                    closed_action_ids: Sequence[int] = ()) -> list[int] | None:
        head = [*prompt_ids, *closed_action_ids]
        if not head:
            return None
        bridged = self.inner.bridge_to_next_turn(list(prompt_ids), list(closed_action_ids),
                                                 template_messages(messages[n_history:]),
                                                 tools=list(tools) if tools else None)
        if bridged is None or list(bridged.token_ids[: len(head)]) != head:
            return None
        return [*bridged.token_ids[len(head):], *self._encode(prefill)]

    def parse(self, action_ids: Sequence[int], *, prefill: str = "", id_seed: str | None = None,
              tools: Sequence[Tool] | None = None) -> ParsedAction:
        body = [*self._encode(prefill), *action_ids[: self.close_turn(action_ids).kept]]
        finished = bool(body) and body[-1] in self.end_of_turn_ids
        response = self.inner.parse_response(body)
        calls: list[dict[str, Any]] = []
        invalid: list[str] = []
        for call in response.tool_calls:
            if str(call.status) != "ok" or not call.name:
                invalid.append(call.raw)
                continue
            arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(
                call.arguments or {}, ensure_ascii=False)
            calls.append({"id": call.id or new_call_id(id_seed, len(calls)), "type": "function",
                          "function": {"name": call.name, "arguments": arguments}})
        content: str | None = "\n".join([response.content or "", *invalid])  # malformed calls stay visible
        if calls or response.reasoning_content is not None or invalid:
            content = (content or "").strip()
        if calls and not content:
            content = None
        return ParsedAction(content=content, tool_calls=calls, reasoning=response.reasoning_content or None,
                            invalid_tool_calls=invalid, finished=finished, parser="renderers")

    def tool_choice_prefill(self, tools: Sequence[Tool] | None, tool_choice: Any) -> str:
        tool_choice_name(tools, tool_choice)  # validated; not enforced (formats differ per family)
        return ""
