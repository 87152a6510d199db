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
from agentr1.core.rendering.call_parsing import FoundCalls, ToolCallParser, parse_text
from agentr1.core.rendering.chatml import SMOLLM2_DEFAULT_SYSTEM, ChatMLRenderer
from agentr1.core.rendering.continuation import (
    PreviousTurn,
    PromptPlan,
    canonical_message,
    canonical_tools,
    plan_prompt,
    same_messages,
)
from agentr1.core.rendering.factory import RendererKind, create_renderer, load_renderer, load_vision_renderer
from agentr1.core.rendering.hermes import hermes_prefill, parse_hermes, split_reasoning
from agentr1.core.rendering.images import ImagePolicy, image_identity, image_ref
from agentr1.core.rendering.template import ChatTemplateRenderer
from agentr1.core.rendering.tool_parsers import (
    TOOL_CALL_PARSERS,
    default_tool_call_parser,
    get_tool_call_parser,
    register_tool_call_parser,
    use_tool_call_parser,
)
from agentr1.core.rendering.turns import assistant_turn_ids
from agentr1.core.rendering.vision import MultimodalInputs, ProcessedImage, VisionRenderer, concat_image_tensors

__all__ = [
    "ROLE_ALIASES",
    "SMOLLM2_DEFAULT_SYSTEM",
    "TOOL_CALL_PARSERS",
    "ChatMLRenderer",
    "ChatTemplateRenderer",
    "FoundCalls",
    "ImagePolicy",
    "Message",
    "MultimodalInputs",
    "ParsedAction",
    "PreviousTurn",
    "ProcessedImage",
    "PromptPlan",
    "RenderError",
    "Renderer",
    "RendererKind",
    "RenderersAdapter",
    "Tool",
    "ToolCallParser",
    "TurnClose",
    "VisionRenderer",
    "assistant_turn_ids",
    "canonical_message",
    "canonical_tools",
    "concat_image_tensors",
    "content_text",
    "create_renderer",
    "default_tool_call_parser",
    "get_tool_call_parser",
    "hermes_prefill",
    "image_identity",
    "image_ref",
    "load_renderer",
    "load_vision_renderer",
    "normalize_messages",
    "parse_hermes",
    "parse_text",
    "plan_prompt",
    "register_tool_call_parser",
    "same_messages",
    "split_reasoning",
    "use_tool_call_parser",
]
