"""Messages + tools -> prompt ids, sampled ids -> OpenAI assistant messages, exact continuation.

See ``docs/rendering.md`` for the design and for why this is not (only) the ``renderers`` package.
"""

from agentr1.core.rendering.adapter import RenderersAdapter
from agentr1.core.rendering.base import (
    ROLE_ALIASES,
    Message,
    ParsedAction,
    Renderer,
    RenderError,
    Tool,
    TurnClose,
    content_text,
    normalize_messages,
)
from agentr1.core.rendering.chatml import SMOLLM2_DEFAULT_SYSTEM, ChatMLRenderer
from agentr1.core.rendering.continuation import (
    PreviousTurn,
    PromptPlan,
    canonical_message,
    canonical_tools,
    plan_prompt,
    same_messages,
)
from agentr1.core.rendering.factory import RendererKind, create_renderer, load_renderer
from agentr1.core.rendering.hermes import hermes_prefill, parse_hermes, split_reasoning
from agentr1.core.rendering.template import ChatTemplateRenderer
from agentr1.core.rendering.turns import assistant_turn_ids

__all__ = [
    "ROLE_ALIASES",
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
    "assistant_turn_ids",
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
