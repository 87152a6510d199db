"""The images of training rows -> verl's ``multi_modal_inputs``, checked so that none is silently dropped.

A row of a vision-language model carries the sha256 of its images in sequence order
(:attr:`~agentr1.trainer.rows.TrainRow.images`, from the step's stored messages). Here each image is
read from the trace store's image directory and processed by the model's own processor, once per
hash (:class:`~agentr1.core.rendering.VisionRenderer`: the same expansion and tensors the gateway fed
generation), and each row gets the dict verl's engines pass to the model with the row
(``micro_batch["multi_modal_inputs"]``, concatenated across the micro-batch on dimension 0 by
``verl.utils.model.extract_multi_modal_inputs``). Idefics3 / SmolVLM ``pixel_values`` (1, tiles, 3, H, W)
become (tiles, 1, 3, H, W): concatenation on dimension 0 then works for rows with different tile counts,
and the model scatters tile features into the image tokens in row-major order, which is the row order.

Every row is checked: its image tokens must be exactly those of its images. A row with image tokens
and no images (images lost on the way), or images that do not match its tokens, raises
:class:`MissingImagesError` instead of training on a prompt the model never saw.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentr1.core import is_vlm_dir

from ..rows import TrainRow

__all__ = ["MissingImagesError", "RowImageInputs", "verl_image_layout"]


class MissingImagesError(ValueError):
    """A row's image tokens and its images disagree (e.g. the images were not stored or not carried)."""


def verl_image_layout(tensors: dict[str, Any]) -> dict[str, Any]:
    """One sample's processor tensors -> the per-row layout verl concatenates on dimension 0."""
    out = {}
    for key, value in tensors.items():
        out[key] = value.transpose(0, 1).contiguous() if value.dim() >= 3 and value.shape[0] == 1 else value
    return out


class RowImageInputs:
    """Per-row ``multi_modal_inputs`` for a vision-language model directory (None for a text model)."""

    def __init__(self, model_path: str | os.PathLike[str], read_image: Callable[[str], bytes] | None = None) -> None:
        # lazy: rendering loads the tokenizers' stack, only when this runs
        from agentr1.core.rendering import ImagePolicy, load_vision_renderer

        # the gateway checked these images when they arrived; a session may hold many of them
        policy = ImagePolicy(max_bytes=1 << 40, max_pixels=1 << 40, max_images=1 << 30)
        self.renderer = load_vision_renderer(Path(model_path), policy=policy, resolve_ref=self._read)
        self.read_image = read_image
        self.image_token_id = self.renderer.image_token_id

    @classmethod
    def for_model(cls, model_path: str | os.PathLike[str],
                  read_image: Callable[[str], bytes] | None = None) -> RowImageInputs | None:
        return cls(model_path, read_image) if is_vlm_dir(model_path) else None

    def _read(self, sha256: str) -> bytes:
        if self.read_image is None:
            raise KeyError("the policy has no image store (set policy.image_store = store.images)")
        return self.read_image(sha256)

    def row_inputs(self, index: int, row: TrainRow) -> dict[str, Any] | None:
        # lazy: rendering loads the tokenizers' stack, only when this runs
        from agentr1.core.rendering import MultimodalInputs, RenderError, image_ref

        expected = row.prompt_ids.count(self.image_token_id) + row.response_ids.count(self.image_token_id)
        if not row.images:
            if expected:
                raise MissingImagesError(f"row {index} (session {row.session_id}) has {expected} image tokens "
                                         "but no images: its images were not stored or not carried")
            return None
        parts = [{"type": "image_url", "image_url": {"url": image_ref(sha)}} for sha in row.images]
        try:
            processed = self.renderer.images([{"role": "user", "content": parts}])
        except RenderError as exc:
            raise MissingImagesError(f"row {index} (session {row.session_id}): {exc}") from exc
        found = sum(p.ids.count(self.image_token_id) for p in processed)
        if found != expected:
            raise MissingImagesError(f"row {index} (session {row.session_id}) has {expected} image tokens, its "
                                     f"{len(row.images)} images make {found}")
        inputs = MultimodalInputs.of(processed)
        return None if inputs is None else verl_image_layout(inputs.tensors)

    def for_rows(self, rows: Sequence[TrainRow]) -> list[dict[str, Any]]:
        """One dict per row ({} for a row without images, which verl skips)."""
        return [self.row_inputs(i, row) or {} for i, row in enumerate(rows)]
