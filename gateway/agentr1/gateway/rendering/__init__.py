"""Messages + tools -> prompt ids, sampled ids -> OpenAI assistant messages, exact continuation.

See ``docs/rendering.md`` for the design and for why this is not (only) the ``renderers`` package.
"""

from agentr1.gateway.rendering.adapter import RenderersAdapter
from agentr1.gateway.rendering.base import (
    Message,
    ParsedAction,
    Renderer,
    RenderError,
    Tool,
    TurnClose,
    content_text,
    normalize_messages,
)
from agentr1.gateway.rendering.chatml import SMOLLM2_DEFAULT_SYSTEM, ChatMLRenderer
from agentr1.gateway.rendering.continuation import (
    PreviousTurn,
    PromptPlan,
    canonical_message,
    canonical_tools,
    plan_prompt,
    same_messages,
)
from agentr1.gateway.rendering.factory import RendererKind, create_renderer, load_renderer
from agentr1.gateway.rendering.hermes import hermes_prefill, parse_hermes, split_reasoning
from agentr1.gateway.rendering.template import ChatTemplateRenderer

__all__ = [
    "SMOLLM2_DEFAULT_SYSTEM",
    "ChatMLRenderer",
    "ChatTemplateRenderer",
    "Message",
    "ParsedAction",
    "PreviousTurn",
    "PromptPlan",
    "RenderError",
    "Renderer",
    "RendererKind",
    "RenderersAdapter",
    "Tool",
    "TurnClose",
    "canonical_message",
    "canonical_tools",
    "content_text",
    "create_renderer",
    "hermes_prefill",
    "load_renderer",
    "normalize_messages",
    "parse_hermes",
    "plan_prompt",
    "same_messages",
    "split_reasoning",
]
