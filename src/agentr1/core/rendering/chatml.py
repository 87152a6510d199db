"""ChatML with hermes-style tools, rendered in Python: SmolLM2's format (and Qwen2.5's shape).

Byte-for-byte the same text as ``agentr1.core.models.CHATML_TOOLS_TEMPLATE`` (checked by the
tests), but without Jinja, and with a structural bridge: ChatML turns are delimited by the special
tokens ``<|im_start|>`` / ``<|im_end|>``, which the tokenizer never merges with neighbouring text,
so the ids after a closed assistant turn are exactly the encoding of ``"\\n" + new turns +
"<|im_start|>assistant\\n"``, whatever the sampled ids of that turn were.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentr1.core.rendering.base import (
    Message,
    RenderError,
    Tool,
    TurnClose,
    arguments_text,
    content_text,
    normalize_messages,
    tool_call_function,
    tool_functions,
)
from agentr1.core.rendering.hermes import HermesTextRenderer, hermes_prefill, tools_block

__all__ = ["SMOLLM2_DEFAULT_SYSTEM", "ChatMLRenderer"]

SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"


class ChatMLRenderer(HermesTextRenderer):
    """ChatML + hermes tools. ``default_system`` is used when the conversation has no system
    message (SmolLM2's template inserts one); None renders no system turn then (unless tools)."""

    def __init__(self, tokenizer: Any, *, default_system: str | None = SMOLLM2_DEFAULT_SYSTEM) -> None:
        self.tokenizer = tokenizer
        self.default_system = default_system
        self.im_end_id = self._special_id(IM_END)
        self._special_id(IM_START)
        self.end_of_turn_ids: tuple[int, ...] = (self.im_end_id,)

    def _special_id(self, token: str) -> int:
        tid = self.tokenizer.convert_tokens_to_ids(token)
        if not isinstance(tid, int) or tid == self.tokenizer.unk_token_id or self.tokenizer.encode(
            token, add_special_tokens=False
        ) != [tid]:
            raise RenderError(f"tokenizer has no special token {token!r}: it is not a ChatML tokenizer")
        return tid

    # -- text -----------------------------------------------------------------------------------

    def render_text(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None, *,
                    add_generation_prompt: bool = True, prefill: str = "") -> str:
        """The prompt as text (what ``CHATML_TOOLS_TEMPLATE`` renders)."""
        msgs = normalize_messages(messages)
        tool_functions(tools)  # validates their shape
        parts: list[str] = []
        if msgs and msgs[0]["role"] == "system":
            system: str | None = content_text(msgs[0].get("content"))
            msgs = msgs[1:]
        else:
            system = self.default_system
        if tools or system is not None:
            parts.append(f"{IM_START}system\n{system or ''}")
            if tools:
                parts.append(tools_block(tools))
            parts.append(f"{IM_END}\n")
        parts.append(self._turns_text(msgs))
        if add_generation_prompt:
            parts.append(f"{IM_START}assistant\n{prefill}")
        elif prefill:
            raise RenderError("prefill needs add_generation_prompt")
        return "".join(parts)

    def _turns_text(self, msgs: Sequence[Message]) -> str:
        parts: list[str] = []
        for i, m in enumerate(msgs):
            role = m["role"]
            if role == "assistant":
                parts.append(self._assistant_text(m))
            elif role == "tool":
                if i == 0 or msgs[i - 1]["role"] != "tool":
                    parts.append(f"{IM_START}user")
                parts.append(f"\n<tool_response>\n{content_text(m.get('content'))}\n</tool_response>")
                if i == len(msgs) - 1 or msgs[i + 1]["role"] != "tool":
                    parts.append(f"{IM_END}\n")
            else:
                parts.append(f"{IM_START}{role}\n{content_text(m.get('content'))}{IM_END}\n")
        return "".join(parts)

    @staticmethod
    def _assistant_text(m: Message) -> str:
        text = content_text(m.get("content"))
        calls = m.get("tool_calls") or []
        if not calls:
            return f"{IM_START}assistant\n{text}{IM_END}\n"
        body = "\n" + text if text else ""
        for call in calls:
            fn = tool_call_function(call)
            arguments = arguments_text(fn.get("arguments"))
            body += f'\n<tool_call>\n{{"name": "{fn["name"]}", "arguments": {arguments}}}\n</tool_call>'
        return f"{IM_START}assistant{body}{IM_END}\n"

    # -- Renderer -------------------------------------------------------------------------------

    def close_turn(self, action_ids: Sequence[int]) -> TurnClose:
        for i, tid in enumerate(action_ids):
            if tid == self.im_end_id:
                return TurnClose(kept=i + 1)  # anything sampled after the turn's end is dropped
        return TurnClose(kept=len(action_ids), appended=(self.im_end_id,))

    def render_tail(self, messages: Sequence[Message], n_history: int, tools: Sequence[Tool] | None, *,
                    prefill: str = "", prompt_ids: Sequence[int] = (),
                    closed_action_ids: Sequence[int] = ()) -> list[int] | None:
        new = normalize_messages(messages[n_history:])
        return self._encode("\n" + self._turns_text(new) + f"{IM_START}assistant\n{prefill}")


    def tool_choice_prefill(self, tools: Sequence[Tool] | None, tool_choice: Any) -> str:
        return hermes_prefill(tools, tool_choice)
