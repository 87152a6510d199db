"""Images in the local engine: a vision-language model's prompt embeddings, with the image features in place.

A request with images (``GenerateRequest.multimodal``: the prompt's pixel tensors, made once by the
gateway's renderer) has its prompt embedded once when it is admitted: the token embeddings, with the
vision encoder's features scattered into the image-token positions in order (what the model's own
forward does with ``pixel_values``). The chunked prefill then feeds ``inputs_embeds`` slices of it, so
the slot KV cache, chunking and decoding stay as they are: decode steps only ever see sampled text
tokens.

Prefix reuse is keyed by token ids, and an image's tokens are the same placeholder ids whatever the
image shows. So a prompt is reusable (and cached) only up to its first image token: two prompts with
the same ids but other images never share keys and values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["image_token_id", "prompt_embeds", "reusable_length", "segment_inputs"]


def image_token_id(model: Any) -> int | None:
    """The image placeholder id of a vision-language model (None for a text model)."""
    config = model.config
    value = getattr(config, "image_token_id", None) if hasattr(config, "vision_config") else None
    return int(value) if value is not None else None


def reusable_length(prompt_ids: Sequence[int], image_id: int | None) -> int:
    """How much of a prompt may come from (or go into) the prefix cache: all of it without images,
    else the ids before its first image token."""
    if image_id is None:
        return len(prompt_ids)
    try:
        return list(prompt_ids).index(image_id)
    except ValueError:
        return len(prompt_ids)


def prompt_embeds(model: Any, prompt_ids: Sequence[int], multimodal: Any, image_id: int | None) -> torch.Tensor:
    """(len(prompt), hidden) input embeddings of the prompt, image features in the image-token positions."""
    if image_id is None:
        raise ValueError("this model takes no images")
    param = next(model.parameters())
    ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=param.device)
    embeds = model.get_input_embeddings()(ids)
    tensors = {k: v.to(param.device, param.dtype) if v.is_floating_point() else v.to(param.device)
               for k, v in multimodal.tensors.items()}
    features = model.get_image_features(**tensors)
    features = getattr(features, "pooler_output", features)
    features = features.reshape(-1, embeds.shape[-1])
    mask = ids == image_id
    if int(mask.sum()) != features.shape[0]:
        raise ValueError(f"the prompt has {int(mask.sum())} image tokens, its images give {features.shape[0]} "
                         "features: the images do not belong to this prompt")
    return embeds.masked_scatter(mask[..., None].expand_as(embeds), features.to(embeds.dtype))[0]


def segment_inputs(model: Any, ids: torch.Tensor, segments: Sequence[tuple[Any, int, int]],
                   width: int) -> dict[str, torch.Tensor]:
    """The model inputs of one prefill forward over left-padded ``segments``: ``input_ids``, or
    ``inputs_embeds`` when a segment's row carries precomputed prompt embeddings (images)."""
    if all(row.embeds is None for row, _, _ in segments):
        return {"input_ids": ids}
    embeds = model.get_input_embeddings()(ids)
    for i, (row, start, end) in enumerate(segments):
        if row.embeds is not None:
            embeds[i, width - (end - start):] = row.embeds[start:end]
    return {"inputs_embeds": embeds}
