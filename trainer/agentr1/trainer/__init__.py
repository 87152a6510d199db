"""The trainer: rollouts through the gateway, rewards, exact-token batches, verl updates.

Public API of the part (imported lazily, so ``import agentr1.trainer.algorithms`` stays light):
:class:`Trainer`, :class:`JobConfig`, :func:`evaluate_checkpoint`, the batch builder
(:func:`build_rows`, :class:`BatchConfig`); the subpackages :mod:`agentr1.trainer.algorithms` and
:mod:`agentr1.trainer.sft` are public too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentr1.core import lazy_exports

if TYPE_CHECKING:
    from agentr1.trainer.batch import BatchConfig, build_rows
    from agentr1.trainer.config import JobConfig
    from agentr1.trainer.evaluate import evaluate_checkpoint
    from agentr1.trainer.loop import Trainer

_HOME = {"BatchConfig": "batch", "build_rows": "batch", "JobConfig": "config",
         "evaluate_checkpoint": "evaluate", "Trainer": "loop"}
__all__ = [
    "BatchConfig",
    "JobConfig",
    "Trainer",
    "build_rows",
    "evaluate_checkpoint",
]
__getattr__ = lazy_exports(__name__, _HOME)
