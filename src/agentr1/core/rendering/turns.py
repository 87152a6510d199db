"""An assistant turn given as text -> the token ids the policy would have sampled for it.

Demonstrations from a teacher behind an external API (text only) and scripted expert actions
have no token ids of the policy. To train on them, the turn is rendered with the policy's own
template: the ids are what follows the generation prompt when the conversation is rendered with
the turn appended, up to and including the end-of-turn token — exactly the span the policy
samples when it produces that message itself. The text after the generation prompt is encoded on
its own, as sampled tokens follow the prompt's ids; a merge across that boundary (encoding the
whole conversation at once) would give ids the policy never emits after that prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentr1.core.rendering.base import Message, Renderer, RenderError, Tool

__all__ = ["assistant_turn_ids"]

_PLACEHOLDER_HISTORY: tuple[Message, ...] = ({"role": "user", "content": "."},)


def assistant_turn_ids(renderer: Renderer, message: Message, history: Sequence[Message] = (),
                       tools: Sequence[Tool] | None = None) -> list[int]:
    """The policy's ids for assistant ``message`` after ``history`` (its content and tool calls,
    rendered as the template renders an assistant turn, ending with the end-of-turn token).

    Without ``history`` a one-message placeholder conversation stands in: the assistant turn of
    chat templates does not depend on what came before it."""
    if message.get("role") != "assistant":
        raise RenderError(f"expected an assistant message, got role {message.get('role')!r}")
    render_text: Any = getattr(renderer, "render_text", None)
    if render_text is None:
        raise RenderError(f"{type(renderer).__name__} renders ids only: rendering text turns needs a text "
                          "renderer (chatml or template)")
    context = list(history) or list(_PLACEHOLDER_HISTORY)
    prompt = render_text(context, tools, add_generation_prompt=True)
    full = render_text([*context, message], tools, add_generation_prompt=False)
    if not full.startswith(prompt):
        raise RenderError("the template renders the assistant turn differently from its generation prompt; "
                          "cannot place the turn's tokens after the prompt")
    ids = list(renderer.tokenizer.encode(full[len(prompt):], add_special_tokens=False))
    for i, token in enumerate(ids):
        if token in renderer.end_of_turn_ids:
            return ids[: i + 1]
    raise RenderError("the rendered assistant turn has no end-of-turn token")
