"""Where training metrics go: JSONL and PNG curves in the job's folder (always), a live progress line on the
terminal (``console``), and the other backends of ``trainer.logger`` through verl's ``Tracking`` (TensorBoard,
MLflow, wandb, SwanLab, ...), as verl users configure them (``agentr1.trainer.config.TrackingOptions``)."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

CURVES = (("reward/mean", "reward"), ("success/val", "held-out success (sampled)"),
          ("success/val_greedy", "held-out success (greedy)"), ("actor/pg_loss", "policy loss"),
          ("actor/kl", "KL to reference"), ("sft/loss", "SFT loss"))


class Tracker:
    """``backends``: ``trainer.logger`` (``console``: the progress line; the others: verl's ``Tracking`` under
    ``project``/``experiment``, given ``config`` as the run's parameters). ``quiet`` silences the progress line."""

    def __init__(self, out_dir: Path, total_steps: int, *, start_step: int = 0, quiet: bool = False,
                 backends: Sequence[str] = ("console", "tensorboard"), project: str = "agentr1",
                 experiment: str = "run", config: dict[str, Any] | None = None) -> None:
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = (out_dir / "metrics.jsonl").open("a", encoding="utf-8")
        self.history: list[dict[str, Any]] = _read_history(out_dir / "metrics.jsonl")
        self.backends = verl_tracking([b for b in backends if b != "console"], out_dir, project, experiment, config)
        self.console = Console(quiet=quiet or "console" not in backends)
        self.progress = Progress(
            TextColumn("[bold]step {task.completed}/{task.total}"), BarColumn(), TextColumn("{task.description}"),
            TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), console=self.console, transient=False,
        )
        self.task = self.progress.add_task("starting", total=total_steps, completed=start_step)
        self.progress.start()

    def status(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, "time": time.time(), **{k: _clean(v) for k, v in metrics.items()}}
        self.history.append(record)
        self.jsonl.write(json.dumps(record) + "\n")
        self.jsonl.flush()
        if self.backends is not None:
            numbers = {k: float(v) for k, v in metrics.items()
                       if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}
            self.backends.log(numbers, step)
        summary = "  ".join(f"{label} {metrics[key]:.3f}" for key, label in
                            (("reward/mean", "reward"), ("actor/pg_loss", "loss"), ("actor/kl", "kl"),
                             ("sft/loss", "sft loss"))
                            if key in metrics)
        if "perf/tokens_per_s" in metrics:
            summary += f"  {metrics['perf/tokens_per_s']:.0f} tok/s"
        if "memory/peak_gb" in metrics:
            summary += f"  peak {metrics['memory/peak_gb']:.1f} GiB"
        self.progress.update(self.task, completed=step, description=summary)

    def plot(self) -> Path | None:
        """Save the reward and loss curves as one PNG; returns its path."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        present = [(k, label) for k, label in CURVES if any(k in r for r in self.history)]
        if not present:
            return None
        fig, axes = plt.subplots(1, len(present), figsize=(4 * len(present), 3.2), squeeze=False)
        for ax, (key, label) in zip(axes[0], present, strict=True):
            points = [(r["step"], r[key]) for r in self.history if isinstance(r.get(key), int | float)]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3)
            ax.set_title(label)
            ax.set_xlabel("training step")
            ax.grid(alpha=0.3)
        fig.tight_layout()
        path = self.out_dir / "curves.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path

    def close(self) -> None:
        self.progress.stop()
        self.jsonl.close()
        if self.backends is not None:
            self.backends.finish()


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _read_history(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def tracking_options(section: Any, run_name: str, config: dict[str, Any]) -> dict[str, Any]:
    """The :class:`Tracker` arguments of a job's ``trainer`` section (``TrackingOptions``)."""
    return {"backends": list(section.logger), "project": section.project_name,
            "experiment": section.experiment_name or run_name, "config": config}


def verl_tracking(backends: Sequence[str], out_dir: Path, project: str, experiment: str,
                  config: dict[str, Any] | None) -> Any:
    """verl's ``Tracking`` over ``backends`` (None when there are none), writing TensorBoard events to
    ``<out_dir>/tensorboard`` and MLflow runs to ``sqlite:///<out_dir>/mlflow.db`` unless ``TENSORBOARD_DIR`` /
    ``MLFLOW_TRACKING_URI`` say otherwise. A backend whose package is missing is an error naming it."""
    if not backends:
        return None
    from verl.utils.tracking import Tracking

    defaults = {"TENSORBOARD_DIR": str(out_dir / "tensorboard"),
                "MLFLOW_TRACKING_URI": f"sqlite:///{(out_dir / 'mlflow.db').resolve()}"}
    with _environment_defaults(defaults):
        try:
            return Tracking(project, experiment, default_backend=list(backends), config=config or {})
        except ModuleNotFoundError as exc:
            raise RuntimeError(f"trainer.logger lists a backend whose package is not installed ({exc.name}): "
                               f"install it or drop it from {list(backends)}") from exc


@contextmanager
def _environment_defaults(values: dict[str, str]) -> Iterator[None]:
    """The environment variables in ``values`` that are not set, set while the block runs (verl reads them)."""
    added = {k: v for k, v in values.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)
