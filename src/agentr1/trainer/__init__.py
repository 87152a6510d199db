"""The trainer: rollouts through the gateway, rewards, exact-token batches, verl updates.

Public API of the part (imported lazily, so ``import agentr1.trainer.algorithms`` stays light):
:class:`Trainer`, :class:`JobConfig` (:func:`fit_dtypes_to_cpu`: its dtypes for this machine),
:func:`evaluate_checkpoint` and the evaluation protocol (:class:`ValidationSampling`, :func:`compare_evaluations`,
:func:`comparison_table`, :func:`metrics_table`), the batch builder (:func:`build_rows`, :class:`BatchConfig`), the
advantages of a task group's stored sessions (:class:`GroupAdvantages`, which ``agentr1 view`` hands the viewer); the subpackages :mod:`agentr1.trainer.algorithms` and
:mod:`agentr1.trainer.sft` are public too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentr1.core import lazy_exports

if TYPE_CHECKING:
    from agentr1.trainer.batch import BatchConfig, build_rows
    from agentr1.trainer.config import JobConfig, ValidationSampling
    from agentr1.trainer.cpu_dtypes import fit_dtypes_to_cpu
    from agentr1.trainer.eval_report import compare_evaluations, comparison_table, metrics_table
    from agentr1.trainer.evaluate import evaluate_checkpoint
    from agentr1.trainer.group_advantages import GroupAdvantages
    from agentr1.trainer.loop import Trainer

_HOME = {"BatchConfig": "batch", "build_rows": "batch", "JobConfig": "config", "ValidationSampling": "config",
         "evaluate_checkpoint": "evaluate", "compare_evaluations": "eval_report", "comparison_table": "eval_report",
         "metrics_table": "eval_report", "Trainer": "loop", "fit_dtypes_to_cpu": "cpu_dtypes",
         "GroupAdvantages": "group_advantages"}
__all__ = [
    "BatchConfig",
    "GroupAdvantages",
    "JobConfig",
    "Trainer",
    "ValidationSampling",
    "build_rows",
    "compare_evaluations",
    "comparison_table",
    "evaluate_checkpoint",
    "fit_dtypes_to_cpu",
    "metrics_table",
]
__getattr__ = lazy_exports(__name__, _HOME)
