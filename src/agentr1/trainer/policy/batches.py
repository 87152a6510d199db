"""Rows into the policy's batches: verl's padded layout with the model's pad id and, for a vision-language model, each
row's pixel inputs, read from an image store (``image_store``: the trace store's images, set by the trainer)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentr1.trainer.padded import PaddedBatch, pad_rows
from agentr1.trainer.rows import TrainRow

from .multimodal import RowImageInputs

__all__ = ["RowBatches", "Rows"]

Rows = Sequence[TrainRow] | PaddedBatch  # what the policy's methods take: rows, or rows already padded


class RowBatches:
    """Padded batches for the model at ``model_path`` (pad id ``pad_token_id``)."""

    def __init__(self, model_path: str | os.PathLike[str], pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id
        self.image_store: Any = None  # anything with get(sha256) -> bytes
        self.image_inputs = RowImageInputs.for_model(Path(model_path), self._read_image)  # None: a text model

    def _read_image(self, sha256: str) -> bytes:
        if self.image_store is None:
            raise KeyError("this policy has no image store (set policy.image_store = store.images)")
        return bytes(self.image_store.get(sha256))

    def pad(self, rows: Sequence[TrainRow], **need: bool) -> PaddedBatch:
        """The rows as tensors, once. ``need_advantages`` / ``need_returns``: fail naming a row without them."""
        batch = pad_rows(rows, pad_id=self.pad_token_id, **need)
        if self.image_inputs is not None:
            batch.multi_modal_inputs = self.image_inputs.for_rows(rows)
        return batch

    def own(self, rows: Rows, **need: bool) -> PaddedBatch:
        """A batch a call may change: the rows padded, or a padded batch's fields in an object of its own (the
        caller's batch keeps its mask and ``extra``; tensors are shared, never written in place)."""
        if not isinstance(rows, PaddedBatch):
            return self.pad(rows, **need)
        for name, flag in (("advantages", "need_advantages"), ("returns", "need_returns")):
            if need.get(flag) and name not in rows.extra:
                raise ValueError(f"the batch has no {name} (not filled in by the advantage stage?)")
        return dataclasses.replace(rows, extra=dict(rows.extra))
