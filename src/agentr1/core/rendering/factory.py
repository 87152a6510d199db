"""Pick the renderer for a tokenizer: our ChatML renderer where it reproduces the model's template
(or the template cannot render tools), the model's own chat template otherwise."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from agentr1.core.rendering.adapter import RenderersAdapter
from agentr1.core.rendering.base import Message, Renderer, RenderError
from agentr1.core.rendering.chatml import IM_END, IM_START, ChatMLRenderer
from agentr1.core.rendering.images import ImagePolicy, RefResolver
from agentr1.core.rendering.template import ChatTemplateRenderer
from agentr1.core.rendering.tool_parsers import default_tool_call_parser, use_tool_call_parser
from agentr1.core.rendering.vision import VisionRenderer

__all__ = ["RendererKind", "create_renderer", "load_renderer", "load_vision_renderer"]

RendererKind = Literal["auto", "chatml", "template", "renderers"]

_PROBE_TOOLS = [{"type": "function", "function": {
    "name": "calc", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
}}]
_PROBES: list[tuple[list[Message], list[dict[str, Any]] | None]] = [
    ([{"role": "user", "content": "Hi 1"}], None),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
      {"role": "assistant", "content": "4"}, {"role": "user", "content": "Thanks\n\n3"}], None),
    ([{"role": "user", "content": "12*7?"},
      {"role": "assistant", "content": "", "tool_calls": [
          {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": '{"expression": "12*7"}'}},
          {"id": "call_2", "type": "function", "function": {"name": "calc", "arguments": '{"expression": "1"}'}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "84"},
      {"role": "tool", "tool_call_id": "call_2", "content": "1"}], _PROBE_TOOLS),
]


def _default_system(tokenizer: Any) -> str | None:
    """The system text the template inserts when the conversation has none (None: no system turn)."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi 1"}], tokenize=False)
    head = f"{IM_START}system\n"
    if text.startswith(head) and f"{IM_END}\n{IM_START}user\n" in text:
        return str(text[len(head): text.index(f"{IM_END}\n{IM_START}user\n")])
    return None


def _chatml_matches(tokenizer: Any) -> ChatMLRenderer | None:
    """A ChatMLRenderer when the tokenizer is ChatML and our rendering equals its template's."""
    try:
        chatml = ChatMLRenderer(tokenizer, default_system=None)
    except RenderError:
        return None
    template = tokenizer.chat_template
    if not template:
        return chatml
    try:
        chatml.default_system = _default_system(tokenizer)
        source = template if isinstance(template, str) else str(template)
        for messages, tools in _PROBES:
            if tools and "tools" not in source:
                continue  # the template ignores tools: ours adds hermes tools to it
            expected = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
            if chatml.render_text(messages, tools) != expected:
                return None
    except Exception:  # a template that fails on the probes is not the ChatML we reproduce
        return None
    return chatml


def create_renderer(tokenizer: Any, kind: RendererKind = "auto", *, tool_call_parser: str | None = None,
                    **options: Any) -> Renderer:
    """``chatml``: :class:`ChatMLRenderer`; ``template``: :class:`ChatTemplateRenderer`;
    ``renderers``: :class:`RenderersAdapter` (the ``renderers`` package's renderer for the model,
    options ``inner=`` / ``config=``); ``auto``: ChatML when it renders exactly what the tokenizer's
    template renders on probe conversations (or the tokenizer is ChatML and its template has no
    tools), else the template. Text renderers read tool calls with ``tool_call_parser`` (default: the
    model family's, :func:`~agentr1.core.rendering.tool_parsers.default_tool_call_parser`)."""
    if kind == "renderers":
        if tool_call_parser is not None:
            raise ValueError("the renderers package parses tool calls itself: tool_call_parser needs kind chatml, "
                             "template or auto")
        return RenderersAdapter(tokenizer, **options)
    renderer: ChatMLRenderer | ChatTemplateRenderer | None
    if kind == "chatml":
        renderer = ChatMLRenderer(tokenizer, **options)
    elif kind == "template":
        renderer = ChatTemplateRenderer(tokenizer, **options)
    elif kind == "auto":
        renderer = _chatml_matches(tokenizer) or ChatTemplateRenderer(tokenizer, **options)
    else:
        raise ValueError(f"unknown renderer kind {kind!r}: use auto, chatml, template or renderers")
    return use_tool_call_parser(renderer, tool_call_parser or default_tool_call_parser(tokenizer))


def load_renderer(tokenizer_or_path: Any, kind: RendererKind = "auto", **options: Any) -> Renderer:
    """A renderer from a tokenizer or a local HF model directory (never downloads). A directory that
    holds a vision-language model gets a :class:`VisionRenderer` (default image policy)."""
    tokenizer = tokenizer_or_path
    if isinstance(tokenizer_or_path, str | os.PathLike):
        from agentr1.core.vision_models import is_vlm_dir

        if is_vlm_dir(tokenizer_or_path):
            return load_vision_renderer(tokenizer_or_path, kind, **options)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(Path(tokenizer_or_path))
    return create_renderer(tokenizer, kind, **options)


def load_vision_renderer(path: str | os.PathLike[str], kind: RendererKind = "auto", *,
                         policy: ImagePolicy | None = None, resolve_ref: RefResolver | None = None,
                         **options: Any) -> VisionRenderer:
    """A :class:`VisionRenderer` for the vision-language model in a local directory: its processor, and
    the text renderer ``kind`` picks for the processor's tokenizer."""
    from agentr1.core.vision_models import load_vlm_processor

    processor: Any = load_vlm_processor(path)
    return VisionRenderer(create_renderer(processor.tokenizer, kind, **options), processor, policy=policy,
                          resolve_ref=resolve_ref)
