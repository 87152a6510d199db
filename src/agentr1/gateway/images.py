"""The images of a call: what the renderer made of the prompt's image parts, checked against the backend.

The rendering hook of the call path (``ModelCall.prepare``): after the prompt is planned, the prompt's
images (hashes in prompt order and the model's pixel tensors, made once per image by the
:class:`~agentr1.core.rendering.VisionRenderer`) go with every :class:`~agentr1.core.generation.
GenerateRequest` of the call. A backend that cannot feed images to its model (``accepts_images`` False)
gets none: the call is refused with 400 instead of generating from a prompt whose images were dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentr1.core.rendering import MultimodalInputs, RenderError
from agentr1.gateway.backends.base import Backend
from agentr1.gateway.errors import APIError

__all__ = ["prompt_images"]


def prompt_images(renderer: Any, backend: Backend, messages: Sequence[dict[str, Any]] | None) -> MultimodalInputs | None:
    """The prompt's images for the backend (None for a text-only prompt or a text model's renderer)."""
    multimodal = getattr(renderer, "multimodal", None)
    if multimodal is None or not messages:
        return None
    try:
        images = multimodal(messages)
    except RenderError as exc:
        raise APIError(400, f"cannot render the request: {exc}", code="invalid_request", param="messages") from exc
    if images is not None and not backend.accepts_images:
        raise APIError(400, f"the {backend.name} backend of this gateway does not take images; send text only, or "
                            "serve the model with the local backend", code="invalid_request", param="messages")
    return images
