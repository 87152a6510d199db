"""Vision-language rendering: image parts -> the model processor's image tokens and pixel tensors.

:class:`VisionRenderer` wraps a text renderer (ChatML or the model's chat template) and the model's
processor (``Idefics3Processor`` for SmolVLM / Idefics3). Each image is processed once, by content
hash, with the processor itself: ``processor(text=<image token>, images=[image])`` gives the ids the
processor expands one image placeholder into (for Idefics3: ``<fake_token_around_image>``,
``<row_i_col_j>``, ``image_seq_len`` x ``<image>`` per tile, the global view) and the image's tensors
(``pixel_values``, ``pixel_attention_mask``, or ``image_grid_thw`` for Qwen-style processors). A prompt
is rendered as text with one placeholder token per image, then each placeholder is replaced by the
image's expansion. The placeholder is a special token and the expansion starts and ends with special
tokens, so the ids equal the processor's own ``processor(text=prompt, images=images)`` (a test checks
it) and the exact continuation of :mod:`~agentr1.core.rendering.continuation` holds across turns that
carry images: a tail with images is spliced the same way.

Text that itself contains the processor's image tokens is refused: it would make the model take
text for image positions.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentr1.core.rendering.base import Message, ParsedAction, Renderer, RenderError, Tool, TurnClose
from agentr1.core.rendering.images import (
    ImageData,
    ImagePolicy,
    RefResolver,
    image_identity,
    is_image_part,
    load_image,
)

__all__ = ["MultimodalInputs", "ProcessedImage", "VisionRenderer", "concat_image_tensors"]


@dataclass(frozen=True, slots=True)
class ProcessedImage:
    """One image as the model takes it: the ids of its expanded placeholder and its tensors
    (batch dimension 1, as the processor returns them)."""

    image: ImageData
    ids: tuple[int, ...]
    tensors: dict[str, Any] = field(repr=False)


@dataclass(frozen=True, slots=True)
class MultimodalInputs:
    """The images of one prompt, in prompt order: their hashes and the model's keyword inputs for them
    (``pixel_values`` etc., concatenated as the processor would for one sample)."""

    image_hashes: tuple[str, ...]
    tensors: dict[str, Any] = field(repr=False)

    @classmethod
    def of(cls, images: Sequence[ProcessedImage]) -> MultimodalInputs | None:
        if not images:
            return None
        return cls(tuple(p.image.sha256 for p in images), concat_image_tensors([p.tensors for p in images]))


def concat_image_tensors(per_image: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One sample's tensors from per-image ones: tensors shaped ``(1, n, ...)`` with an image axis
    (Idefics3's ``pixel_values`` (1, tiles, 3, H, W)) are joined on that axis, flat ones (Qwen-style
    ``(patches, dim)``, ``image_grid_thw`` (1, 3)) on the first."""
    import torch

    out: dict[str, Any] = {}
    for key in per_image[0]:
        tensors = [t[key] for t in per_image]
        batched = all(t.dim() >= 3 and t.shape[0] == 1 for t in tensors)
        out[key] = torch.cat(tensors, dim=1 if batched else 0)
    return out


class VisionRenderer:
    """A :class:`~agentr1.core.rendering.base.Renderer` for a vision-language model.

    ``text``: the renderer of the model's chat format (its tokenizer must hold the image tokens);
    ``processor``: the model's processor; ``policy``: which images are accepted; ``resolve_ref``:
    reads a stored image by sha256 (stored conversations re-rendered by the trainer)."""

    def __init__(self, text: Renderer, processor: Any, *, policy: ImagePolicy | None = None,
                 resolve_ref: RefResolver | None = None, cache_size: int = 256) -> None:
        self.text = text
        self.processor = processor
        self.tokenizer = text.tokenizer
        self.end_of_turn_ids = text.end_of_turn_ids
        self.policy = policy or ImagePolicy()
        self.resolve_ref = resolve_ref
        self.image_token = str(processor.image_token)
        self.image_token_id = int(self.tokenizer.convert_tokens_to_ids(self.image_token))
        if self.tokenizer.encode(self.image_token, add_special_tokens=False) != [self.image_token_id]:
            raise RenderError(f"the tokenizer does not hold the image token {self.image_token!r} as one token")
        added = [str(t.content) for t in getattr(self.tokenizer, "added_tokens_decoder", {}).values()]
        self.reserved = tuple(t for t in added if "image" in t or t.startswith("<row_") or t == "<global-img>")
        self._cache: OrderedDict[str, ProcessedImage] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._check_text_renderer()

    def _check_text_renderer(self) -> None:
        """The text renderer must keep text parts and the placeholder where they are: a chat template that
        reads content parts its own way (SmolVLM's iterates ``{"type": "image"}`` parts) would lose them."""
        probe = [{"role": "user", "content": [{"type": "text", "text": "probe 7"},
                                              {"type": "text", "text": self.image_token}]}]
        ids = self.text.render(probe)
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        if ids.count(self.image_token_id) != 1 or f"probe 7{self.image_token}" not in text:
            raise RenderError(f"the text renderer ({type(self.text).__name__}) does not render content parts as "
                              "text in place; this model's chat template is not supported for images "
                              "(docs/multimodal.md)")

    # -- images ---------------------------------------------------------------------------------

    def process(self, image: ImageData) -> ProcessedImage:
        """The image's expansion ids and tensors, computed once per content hash."""
        with self._lock:
            hit = self._cache.get(image.sha256)
            if hit is not None:
                self._cache.move_to_end(image.sha256)
                return hit
        try:
            out = self.processor(text=[self.image_token], images=[[image.pil()]], return_tensors="pt",
                                 add_special_tokens=False)
        except (ValueError, OSError, RuntimeError) as exc:
            raise RenderError(f"the model's processor cannot read the image ({exc})") from exc
        ids = tuple(int(t) for t in out["input_ids"][0])
        tensors = {k: v for k, v in out.items() if k not in ("input_ids", "attention_mask", "token_type_ids")}
        processed = ProcessedImage(image=image, ids=ids, tensors=tensors)
        with self._lock:
            self._cache[image.sha256] = processed
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return processed

    def images(self, messages: Sequence[Message]) -> list[ProcessedImage]:
        """The processed images of ``messages`` in prompt order (checked against the policy)."""
        parts = [p for m in messages if isinstance(m, dict) and isinstance(m.get("content"), list)
                 for p in m["content"] if is_image_part(p)]
        if len(parts) > self.policy.max_images:
            raise RenderError(f"{len(parts)} images in one request, more than the limit of {self.policy.max_images}")
        out = []
        for part in parts:
            identity = image_identity(part)  # the hash of inline bytes: a known image is not decoded again
            with self._lock:
                hit = self._cache.get(identity[len("sha256:"):]) if identity.startswith("sha256:") else None
            out.append(hit or self.process(load_image(part, self.policy, self.resolve_ref)))
        return out

    def multimodal(self, messages: Sequence[Message]) -> MultimodalInputs | None:
        """What generation and training feed the model besides the ids (None for a text-only prompt)."""
        return MultimodalInputs.of(self.images(messages))

    def _placeholders(self, messages: Sequence[Message]) -> list[Message]:
        """Messages with each image part replaced by one placeholder token (text checked for image tokens)."""
        out = []
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                self._check_text(content)
            if not isinstance(content, list):
                out.append(message)
                continue
            parts = []
            for part in content:
                if is_image_part(part):
                    parts.append({"type": "text", "text": self.image_token})
                    continue
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    self._check_text(part["text"])
                parts.append(part)
            out.append({**message, "content": parts})
        return out

    def _check_text(self, text: str) -> None:
        for token in self.reserved:
            if token in text:
                raise RenderError(f"message text contains the image token {token!r}; send images as image parts")

    def _splice(self, ids: list[int], images: Sequence[ProcessedImage]) -> list[int]:
        positions = [i for i, t in enumerate(ids) if t == self.image_token_id]
        if len(positions) != len(images):
            raise RenderError(f"the prompt has {len(positions)} image placeholders for {len(images)} images")
        out: list[int] = []
        start = 0
        for position, image in zip(positions, images, strict=True):
            out.extend(ids[start:position])
            out.extend(image.ids)
            start = position + 1
        out.extend(ids[start:])
        return out

    # -- Renderer -------------------------------------------------------------------------------

    def render(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None, *,
               add_generation_prompt: bool = True, prefill: str = "") -> list[int]:
        images = self.images(messages)
        ids = self.text.render(self._placeholders(messages), tools, add_generation_prompt=add_generation_prompt,
                               prefill=prefill)
        return self._splice(ids, images)

    def render_text(self, messages: Sequence[Message], tools: Sequence[Tool] | None = None, *,
                    add_generation_prompt: bool = True, prefill: str = "") -> str:
        """The prompt text with one placeholder token per image (what ``processor(text=...)`` takes)."""
        render_text: Any = getattr(self.text, "render_text", None)
        if render_text is None:
            raise RenderError(f"{type(self.text).__name__} renders ids only")
        return str(render_text(self._placeholders(messages), tools, add_generation_prompt=add_generation_prompt,
                               prefill=prefill))

    def render_tail(self, messages: Sequence[Message], n_history: int, tools: Sequence[Tool] | None, *,
                    prefill: str = "", prompt_ids: Sequence[int] = (),
                    closed_action_ids: Sequence[int] = ()) -> list[int] | None:
        images = self.images(messages[n_history:])
        tail = self.text.render_tail(self._placeholders(messages), n_history, tools, prefill=prefill,
                                     prompt_ids=prompt_ids, closed_action_ids=closed_action_ids)
        return None if tail is None else self._splice(list(tail), images)

    def parse(self, action_ids: Sequence[int], *, prefill: str = "", id_seed: str | None = None,
              tools: Sequence[Tool] | None = None) -> ParsedAction:
        return self.text.parse(action_ids, prefill=prefill, id_seed=id_seed, tools=tools)

    @property
    def tool_parser(self) -> Any:
        """The text renderer's tool-call parser (:mod:`agentr1.core.rendering.tool_parsers`)."""
        return self.text.tool_parser  # type: ignore[attr-defined]

    @tool_parser.setter
    def tool_parser(self, parser: Any) -> None:
        self.text.tool_parser = parser  # type: ignore[attr-defined]

    def close_turn(self, action_ids: Sequence[int]) -> TurnClose:
        return self.text.close_turn(action_ids)

    def tool_choice_prefill(self, tools: Sequence[Tool] | None, tool_choice: Any) -> str:
        return self.text.tool_choice_prefill(tools, tool_choice)
