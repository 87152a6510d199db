"""Any HF model: render with the tokenizer's own chat template (``apply_chat_template`` with tools).

The template is opaque, so the pieces the bridge needs are found by probing it once:

- the turn-close token: the first special token the template writes after an assistant's content
  (``<|im_end|>``, ``<|eot_id|>``, ``<end_of_turn>``, ...);
- the tail after a closed assistant turn: the template's text for the whole conversation minus its
  text for the history up to that turn, plus whatever the template writes after the close token
  (``"\\n"`` in ChatML). When the longer render does not extend the shorter one (templates that
  rewrite history, e.g. drop old ``<think>`` blocks), there is no tail: the caller renders afresh.

Parsing is text-level, with ``<think>`` reasoning and the tool-call parser of the model's family (hermes tags for
Qwen2.5/3, Hermes and our SmolLM2 template; tags or bare JSON for Qwen2.5-Coder; others by name:
:mod:`agentr1.core.rendering.tool_parsers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentr1.core.rendering.base import (
    Message,
    RenderError,
    Tool,
    TurnClose,
    template_messages,
    tool_choice_name,
    tool_functions,
)
from agentr1.core.rendering.hermes import HermesTextRenderer, hermes_prefill

__all__ = ["ChatTemplateRenderer"]

_PROBE_USER, _PROBE_REPLY = "Probe question 7?", "Probe answer 7."


class ChatTemplateRenderer(HermesTextRenderer):
    """Renders through ``tokenizer.apply_chat_template``; ``chat_template`` overrides the tokenizer's."""

    def __init__(self, tokenizer: Any, *, chat_template: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template or tokenizer.chat_template
        if not self.chat_template:
            raise RenderError("the tokenizer has no chat template")
        source = self.chat_template if isinstance(self.chat_template, str) else str(self.chat_template)
        self.hermes = "<tool_call>" in source
        self.close_id, self.close_text = self._probe_close()
        ends = [self.close_id]
        eos = getattr(tokenizer, "eos_token_id", None)
        if isinstance(eos, int) and eos not in ends:
            ends.append(eos)
        self.end_of_turn_ids: tuple[int, ...] = tuple(ends)

    def _probe_close(self) -> tuple[int, str]:
        text = self.render_text([{"role": "user", "content": _PROBE_USER},
                                 {"role": "assistant", "content": _PROBE_REPLY}], add_generation_prompt=False)
        at = text.rfind(_PROBE_REPLY)
        specials = set(getattr(self.tokenizer, "all_special_ids", []) or [])
        specials |= set(getattr(self.tokenizer, "added_tokens_decoder", {}) or {})
        if at >= 0:
            for tid in self.tokenizer.encode(text[at + len(_PROBE_REPLY):], add_special_tokens=False):
                if tid in specials:
                    return tid, self.tokenizer.decode([tid], skip_special_tokens=False)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if not isinstance(eos, int):
            raise RenderError("cannot tell how the chat template ends an assistant turn (no eos token)")
        return eos, self.tokenizer.decode([eos], skip_special_tokens=False)

    # -- text -----------------------------------------------------------------------------------

    def render_text(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None, *,
                    add_generation_prompt: bool = True, prefill: str = "") -> str:
        tool_functions(tools)
        try:
            text = self.tokenizer.apply_chat_template(
                template_messages(messages), tools=list(tools) if tools else None, chat_template=self.chat_template,
                add_generation_prompt=add_generation_prompt, tokenize=False,
            )
        except RenderError:
            raise
        except Exception as exc:  # jinja's raise_exception, template errors on odd inputs
            raise RenderError(f"the chat template failed on these messages: {exc}") from exc
        if prefill and not add_generation_prompt:
            raise RenderError("prefill needs add_generation_prompt")
        return str(text) + prefill

    # -- Renderer -------------------------------------------------------------------------------

    def close_turn(self, action_ids: Sequence[int]) -> TurnClose:
        for i, tid in enumerate(action_ids):
            if tid == self.close_id:
                return TurnClose(kept=i + 1)
            if tid in self.end_of_turn_ids:  # eos that is not the template's close: keep it, then close
                return TurnClose(kept=i + 1, appended=(self.close_id,))
        return TurnClose(kept=len(action_ids), appended=(self.close_id,))

    def render_tail(self, messages: Sequence[Message], n_history: int, tools: Sequence[Tool] | None, *,
                    prefill: str = "", prompt_ids: Sequence[int] = (),
                    closed_action_ids: Sequence[int] = ()) -> list[int] | None:
        base = self.render_text(messages[:n_history], tools, add_generation_prompt=False)
        full = self.render_text(messages, tools, add_generation_prompt=True, prefill=prefill)
        cut = base.rfind(self.close_text)
        trailer = base[cut + len(self.close_text):] if cut >= 0 else ""
        if cut < 0 or trailer.strip() or not full.startswith(base):
            return None  # the turn does not end with the close token, or the history is re-rendered
        return self._encode(trailer + full[len(base):])


    def tool_choice_prefill(self, tools: Sequence[Tool] | None, tool_choice: Any) -> str:
        if self.hermes:
            return hermes_prefill(tools, tool_choice)
        tool_choice_name(tools, tool_choice)  # validated, not enforced
        return ""
