"""The policy's weights out: to a serving backend (:meth:`WeightSync.sync_to`) and as a servable HF directory
(:meth:`WeightSync.save`).

A backend that declares ``weights_in_memory`` (the embedded engine; SGLang servers on this machine, through the
trainer's serving) gets the tensors with ``update_weights_from_tensors``, without touching disk; any other (SGLang or
vLLM servers anywhere) gets a HF directory written under ``sync_dir`` and loads it with ``update_weights(path)``
(``/update_weights_from_disk`` or vLLM's reload), so ``sync_dir`` must be a path the servers can read (a shared
filesystem across nodes). Only the latest directory is kept: a server that missed one update loads the next."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from agentr1.core import release_openmp_threads

from .export import save_hf_directory
from .updates import TrainedModel

__all__ = ["WeightSync"]


class WeightSync:
    """The actor's weights for serving: ``model_path`` gives the config and tokenizer of a saved directory;
    ``sync_dir``: where directories for remote servers go (None: a temporary directory, made at the first sync)."""

    def __init__(self, actor: TrainedModel, model_path: Path, sync_dir: str | os.PathLike[str] | None) -> None:
        self.actor = actor
        self.model_path = model_path
        self.sync_dir = Path(sync_dir) if sync_dir else None

    def state_dict(self, *, copy: bool = True) -> dict[str, torch.Tensor]:
        """Full policy weights under Hugging Face names (``copy=False`` may alias live parameters)."""
        return {name: (t.clone() if copy else t) for name, t in self.actor.named_tensors()}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """A servable HF directory: ``model.safetensors`` + the source's config and tokenizer."""
        return save_hf_directory(self.actor.named_tensors(), self.model_path, path)

    async def sync_to(self, backend: Any, version: int) -> int:
        """Load the weights of policy ``version`` into ``backend`` (module docstring); returns the policy version it
        reports afterwards (it waits for requests in flight, so no response mixes versions)."""
        if backend.weights_in_memory:
            try:
                return int(await backend.update_weights_from_tensors(self.state_dict(copy=False)))
            finally:
                release_openmp_threads()  # this (event loop) thread's, as after an update (update_phase)
        if self.sync_dir is None:
            self.sync_dir = Path(tempfile.mkdtemp(prefix="agentr1-weights-"))
        path = await asyncio.to_thread(self.save, self.sync_dir / f"policy-{version}")
        reported = int(await backend.update_weights(str(path)))
        for older in self.sync_dir.glob("policy-*"):
            if older != path:
                shutil.rmtree(older, ignore_errors=True)
        return reported
