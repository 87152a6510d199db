"""Where training metrics go: JSONL (always), TensorBoard (when installed), PNG curves, and a
live progress line on the terminal."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

CURVES = (("reward/mean", "reward"), ("success/val", "held-out success (sampled)"),
          ("success/val_greedy", "held-out success (greedy)"), ("actor/pg_loss", "policy loss"),
          ("actor/kl", "KL to reference"), ("sft/loss", "SFT loss"))


class Tracker:
    def __init__(self, out_dir: Path, total_steps: int, *, start_step: int = 0, quiet: bool = False) -> None:
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = (out_dir / "metrics.jsonl").open("a", encoding="utf-8")
        self.history: list[dict[str, Any]] = _read_history(out_dir / "metrics.jsonl")
        self.tb = _tensorboard(out_dir / "tensorboard")
        self.console = Console(quiet=quiet)
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
        if self.tb is not None:
            for key, value in metrics.items():
                if isinstance(value, int | float) and math.isfinite(value):
                    self.tb.add_scalar(key, value, step)
            self.tb.flush()
        summary = "  ".join(f"{label} {metrics[key]:.3f}" for key, label in
                            (("reward/mean", "reward"), ("actor/pg_loss", "loss"), ("actor/kl", "kl"),
                             ("sft/loss", "sft loss"))
                            if key in metrics)
        if "perf/tokens_per_s" in metrics:
            summary += f"  {metrics['perf/tokens_per_s']:.0f} tok/s"
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
        if self.tb is not None:
            self.tb.close()


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _read_history(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _tensorboard(path: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(log_dir=str(path))
