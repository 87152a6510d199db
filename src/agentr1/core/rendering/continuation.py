"""Exact multi-turn continuation (the bridge): the next prompt extends the previous prompt and the
sampled action token for token, instead of re-rendering history from text.

Re-rendering an assistant turn from its text does not reproduce what the model sampled (models
sample non-canonical tokenisations; tool calls come back re-serialised), so a trainer would score
tokens the model never produced. When a request continues the previous step's conversation::

    messages == previous.messages + [the assistant message we returned] + new messages

(the echo compared semantically, see :func:`canonical_message`) and the tools are the same, the
prompt is ``previous.prompt_ids + action_ids[:kept] + closing_ids + tail``: the sampled ids cut at
the first end-of-turn token, the end-of-turn token appended when the model stopped without one
(stop string, length), then the rendered new messages and the generation prompt. ``new_ids``
(``closing_ids + tail``) is the feedback e_t. Anything else is rendered afresh: with ``drift=True``
when the conversation was rewritten (edited or dropped messages, another reply, other tools), with
``drift=False`` for a new conversation or a repeated request.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentr1.core.rendering.base import (
    ROLE_ALIASES,
    Message,
    Renderer,
    RenderError,
    Tool,
    content_text,
    decoded_arguments,
)
from agentr1.core.rendering.images import image_identity, is_image_part

__all__ = ["PreviousTurn", "PromptPlan", "canonical_message", "canonical_tools", "plan_prompt", "same_messages"]


@dataclass(slots=True)
class PreviousTurn:
    """The step a request may continue: what the model saw and sampled, and what we answered.

    ``prefill`` is text the previous prompt put at the start of the assistant turn (tool_choice
    enforcement); it is part of ``prompt_ids``."""

    messages: list[Message]
    tools: list[Tool] | None
    prompt_ids: list[int]
    action_ids: list[int]
    assistant_message: Message
    prefill: str = ""


@dataclass(slots=True)
class PromptPlan:
    """The prompt for a request and how it relates to the previous step.

    ``continued``: ``prompt_ids == previous.prompt_ids + previous.action_ids[:action_kept] + new_ids``.
    ``new_messages`` / ``new_ids``: the messages that arrived after our reply and the ids appended for
    them (``closing_ids`` first, then the rendered tail up to the generation prompt and ``prefill``);
    when not continued, the whole conversation and ``prompt_ids``. ``reason`` says which case applied:
    new, continued, repeat, tools_changed, history_changed, reply_changed, reply_missing, no_bridge."""

    prompt_ids: list[int]
    drift: bool = False
    continued: bool = False
    new_messages: list[Message] = field(default_factory=list)
    new_ids: list[int] = field(default_factory=list)
    action_kept: int = 0
    action_dropped: int = 0
    closing_ids: list[int] = field(default_factory=list)
    prefill: str = ""
    reason: str = "new"


def _canonical_part(part: Any) -> Any:
    if is_image_part(part):
        try:  # by content: a data URL, an Anthropic base64 block and the stored reference are one image
            return {"image": image_identity(part)}
        except RenderError:
            return part
    if isinstance(part, dict) and part.get("type", "text") in ("text", "input_text", "output_text"):
        return {"text": str(part.get("text") or "")}
    return part


def _canonical_content(content: Any) -> Any:
    try:
        return content_text(content)
    except RenderError:  # images and other parts: compared part by part, images by content hash
        return [_canonical_part(p) for p in content] if isinstance(content, list) else content


def _canonical_arguments(arguments: Any) -> Any:
    value = decoded_arguments(arguments)
    return value.strip() if isinstance(value, str) else value


def canonical_message(message: Message) -> dict[str, Any]:
    """What of a message reaches the model, in a form that survives agents' re-serialisation.

    Roles resolved (developer -> system, function -> tool); content parts joined; for assistant
    messages: content stripped and None == "", tool calls reduced to (name, arguments as a JSON
    value: whitespace and key order do not matter). Ignored: tool-call ids (agents regenerate them,
    the prompt does not show them), ``reasoning_content`` (agents drop it), ``name``, ``refusal``,
    ``annotations``, ``audio`` and any other extra field."""
    role = str(message.get("role", ""))
    role = ROLE_ALIASES.get(role, role)
    out: dict[str, Any] = {"role": role, "content": _canonical_content(message.get("content"))}
    if role == "assistant":
        if isinstance(out["content"], str):
            out["content"] = out["content"].strip()
        calls = message.get("tool_calls") or []
        if not calls and isinstance(message.get("function_call"), dict):
            calls = [{"function": message["function_call"]}]
        if calls:
            out["tool_calls"] = [
                {"name": fn.get("name"), "arguments": _canonical_arguments(fn.get("arguments"))}
                for fn in (c.get("function", c) if isinstance(c, dict) else {} for c in calls)
            ]
    return out


def canonical_tools(tools: Sequence[Tool] | None) -> str:
    """Tools as a comparable string (None == [])."""
    return json.dumps(list(tools or []), sort_keys=True, ensure_ascii=False)


def same_messages(a: Sequence[Message], b: Sequence[Message]) -> bool:
    return len(a) == len(b) and all(canonical_message(x) == canonical_message(y) for x, y in zip(a, b, strict=True))


def _fresh(messages: Sequence[Message], tools: Sequence[Tool] | None, renderer: Renderer, prefill: str, *,
           drift: bool, reason: str) -> PromptPlan:
    ids = renderer.render(messages, tools, add_generation_prompt=True, prefill=prefill)
    return PromptPlan(prompt_ids=ids, drift=drift, new_messages=list(messages), new_ids=list(ids),
                      prefill=prefill, reason=reason)


def _first_difference(previous: Sequence[Message], messages: Sequence[Message]) -> int | None:
    n = len(previous)
    if len(messages) >= n and list(messages[:n]) == list(previous):  # resent as it was: compared in C (identity)
        return None
    for i, old in enumerate(previous):
        if i >= len(messages):
            return i
        if old == messages[i]:  # the same dict (an agent resending its history): same canonical form, compared in C
            continue
        if canonical_message(old) != canonical_message(messages[i]):
            return i
    return None


def plan_prompt(previous: PreviousTurn | None, messages: Sequence[Message], tools: Sequence[Tool] | None,
                renderer: Renderer, *, tool_choice: Any = None) -> PromptPlan:
    """The prompt for ``messages`` + ``tools``: continuing ``previous`` exactly when the request extends
    it, rendered afresh otherwise. ``tool_choice`` "none" renders without tools; "required" or a named
    function adds the renderer's prefill (hermes formats: an opened ``<tool_call>``); pass the plan's
    ``prefill`` to ``renderer.parse``. Raises :class:`RenderError` for messages it cannot render."""
    if tool_choice == "none":
        tools = None
    prefill = renderer.tool_choice_prefill(tools, tool_choice)
    if previous is None:
        return _fresh(messages, tools, renderer, prefill, drift=False, reason="new")
    if canonical_tools(tools) != canonical_tools(previous.tools):
        return _fresh(messages, tools, renderer, prefill, drift=True, reason="tools_changed")
    n = len(previous.messages)
    if _first_difference(previous.messages, messages) is not None:
        return _fresh(messages, tools, renderer, prefill, drift=True, reason="history_changed")
    if len(messages) == n:  # the same request again (retry, another sample): the same prompt
        if prefill == previous.prefill:
            return PromptPlan(prompt_ids=list(previous.prompt_ids), new_messages=list(messages),
                              new_ids=list(previous.prompt_ids), prefill=prefill, reason="repeat")
        return _fresh(messages, tools, renderer, prefill, drift=False, reason="repeat")
    if messages[n].get("role") != "assistant":
        return _fresh(messages, tools, renderer, prefill, drift=True, reason="reply_missing")
    if canonical_message(messages[n]) != canonical_message(previous.assistant_message):
        return _fresh(messages, tools, renderer, prefill, drift=True, reason="reply_changed")
    close = renderer.close_turn(previous.action_ids)
    closing = list(close.appended)
    tail = renderer.render_tail(messages, n + 1, tools, prefill=prefill, prompt_ids=previous.prompt_ids,
                                closed_action_ids=[*previous.action_ids[: close.kept], *closing])
    if tail is None:
        return _fresh(messages, tools, renderer, prefill, drift=True, reason="no_bridge")
    new_ids = closing + tail
    return PromptPlan(
        prompt_ids=list(previous.prompt_ids) + list(previous.action_ids[: close.kept]) + new_ids,
        continued=True, new_messages=list(messages[n + 1:]), new_ids=new_ids, action_kept=close.kept,
        action_dropped=len(previous.action_ids) - close.kept, closing_ids=closing, prefill=prefill,
        reason="continued",
    )
