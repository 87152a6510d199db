"""`agentr1 train CONFIG`: run a training job."""

from __future__ import annotations

import json
import logging

import typer


def load_job(config: str, overrides: list[str] | None) -> object:
    """The job of ``config`` with ``overrides``, its dtypes fitted to this machine (``agentr1.trainer.cpu_dtypes``:
    bfloat16 only where the CPU multiplies it in hardware), as ``train`` and ``eval`` both run it."""
    try:
        from agentr1.trainer import JobConfig, fit_dtypes_to_cpu
    except ModuleNotFoundError as exc:
        typer.secho(f"error: training needs `pip install 'agentr1[trainer]'` ({exc.name} missing)", fg="red", err=True)
        raise typer.Exit(2) from exc
    from pydantic import ValidationError

    try:
        return fit_dtypes_to_cpu(JobConfig.from_yaml(config, overrides))
    except (OSError, ValueError, ValidationError) as exc:
        typer.secho(f"error: cannot load {config}: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc


def train(
    config: str = typer.Argument(..., help="Job config (YAML)."),
    overrides: list[str] = typer.Argument(None, help="key.sub=value overrides, e.g. trainer.total_training_steps=2"),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
) -> None:
    """Train the policy: rollout -> reward -> replay -> update, step by step (resumes by default)."""
    # lazy: the trainer extra (torch, verl) stays off --help
    from agentr1.trainer import Trainer

    job = load_job(config, overrides)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    trainer = Trainer(job, quiet=quiet)  # type: ignore[arg-type]
    trainer.setup()
    try:
        final = trainer.train()
    finally:
        trainer.close()
    typer.echo(json.dumps({k: v for k, v in final.items() if k.startswith(("reward", "success", "policy"))}))
