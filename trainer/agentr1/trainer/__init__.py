"""The trainer: rollouts through the gateway, rewards, exact-token batches, verl updates.

Public API of the part (imported lazily, so ``import agentr1.trainer.algorithms`` stays light):
:class:`Trainer`, :class:`JobConfig`, :func:`evaluate_checkpoint`, the batch builder
(:func:`build_rows`, :class:`BatchConfig`); the subpackages :mod:`agentr1.trainer.algorithms` and
:mod:`agentr1.trainer.sft` are public too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentr1.trainer.batch import BatchConfig, build_rows
    from agentr1.trainer.config import JobConfig
    from agentr1.trainer.evaluate import evaluate_checkpoint
    from agentr1.trainer.loop import Trainer

__all__ = ["BatchConfig", "JobConfig", "Trainer", "build_rows", "evaluate_checkpoint"]

_HOME = {"BatchConfig": "batch", "build_rows": "batch", "JobConfig": "config",
         "evaluate_checkpoint": "evaluate", "Trainer": "loop"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
