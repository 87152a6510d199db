"""`agentr1 train CONFIG` and `agentr1 eval CONFIG`: run a training job or evaluate a checkpoint."""

from __future__ import annotations

import json
import logging
import sys

import typer


def _load(config: str, overrides: list[str] | None) -> object:
    try:
        from agentr1.trainer import JobConfig
    except ModuleNotFoundError as exc:
        typer.secho(f"error: training needs `pip install 'agentr1[trainer]'` ({exc.name} missing)", fg="red", err=True)
        raise typer.Exit(2) from exc
    from pydantic import ValidationError

    try:
        return JobConfig.from_yaml(config, overrides)
    except (OSError, ValueError, ValidationError) as exc:
        typer.secho(f"error: cannot load {config}: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc


def train(
    config: str = typer.Argument(..., help="Job config (YAML)."),
    overrides: list[str] = typer.Argument(None, help="key.sub=value overrides, e.g. trainer.total_training_steps=2"),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
) -> None:
    """Train the policy: rollout -> reward -> replay -> update, step by step (resumes by default)."""
    from agentr1.trainer import Trainer

    job = _load(config, overrides)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    trainer = Trainer(job, quiet=quiet)  # type: ignore[arg-type]
    trainer.setup()
    try:
        final = trainer.train()
    finally:
        trainer.close()
    typer.echo(json.dumps({k: v for k, v in final.items() if k.startswith(("reward", "success", "policy"))}))


def evaluate(
    config: str = typer.Argument(..., help="Job config (YAML): the agent, the held-out tasks, the rewards."),
    checkpoint: str = typer.Option(None, "--checkpoint", help="A servable checkpoint dir (…/step_N/hf); "
                                   "default: the config's model."),
    overrides: list[str] = typer.Argument(None),
    split: str = typer.Option("val", "--split", help="val (held-out success) or train (collect rollouts, e.g. "
                              "for best-of-n SFT)."),
    n: int = typer.Option(1, "--n", min=1, help="Samples per task."),
    run_id: str = typer.Option(None, "--run-id", help="Store run of the sessions (default: <run_name>-eval-<time>)."),
) -> None:
    """Held-out success of a checkpoint (one sample per validation task), or n rollouts per task of a split."""
    import asyncio

    from agentr1.trainer import evaluate_checkpoint

    if split not in ("train", "val"):
        typer.secho(f"error: --split must be train or val, not {split!r}", fg="red", err=True)
        raise typer.Exit(2)
    job = _load(config, overrides)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    typer.echo(json.dumps(asyncio.run(evaluate_checkpoint(job, checkpoint, split=split, n=n,  # type: ignore[arg-type]
                                                           run_id=run_id))))
