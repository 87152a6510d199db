"""`agentr1 eval CONFIG`: evaluate a checkpoint under the evaluation protocol, or compare two on the same tasks.

On the job's test split by default (``--split test``: tasks held out from training and from choosing settings, the
split for claims); ``--split val`` evaluates on the tasks settings are chosen on. The job's dtypes are fitted to this
machine as ``agentr1 train`` fits them (``agentr1.cli.train.load_job``), so a checkpoint is served in the dtype its
job trains in (the answer's ``dtype`` names the dtype served). Progress (episodes done, success so far, elapsed,
time left) goes to stderr as episodes end. On the CPU the greedy pass is reproducible: the same checkpoint gives the
same episodes every time on the same machine, whatever the load and concurrency (``--reproducible``, the default:
``agentr1.trainer.evaluate.reproducible_settings``).

Greedy pass@1 (temperature 0 on every call) and K samples a task at the sampling temperature (mean@K, pass@K,
maj@K), each with a 95% bootstrap interval (agentr1.trainer.eval_metrics). The gateway applies the decoding to
every call of the evaluation's sessions, whatever the agent asks. ``--compare A B`` evaluates both checkpoints on
the same tasks and prints paired tests (McNemar on greedy success, paired bootstrap on mean@K and pass@K).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, NoReturn

import typer

from agentr1.cli.train import load_job

_DETAIL = "tasks_detail"


def evaluate(
    config: str = typer.Argument(..., help="Job config (YAML): the agent, the held-out tasks, the rewards."),
    overrides: list[str] = typer.Argument(None, help="key.sub=value overrides, e.g. data.test_size=128"),
    checkpoint: str = typer.Option(None, "--checkpoint", help="A servable checkpoint dir (…/step_N/hf); "
                                   "default: the config's model."),
    compare: tuple[str, str] = typer.Option(None, "--compare", help="Two checkpoints A B (a dir, or a "
                                            "model name such as smollm2) evaluated on the same tasks, with paired "
                                            "tests of B against A."),
    temperature: float = typer.Option(None, "--temperature", min=0.0, help="Temperature of the K sampled runs "
                                      "(overrides the agent's / the task rows' own; 0 = greedy). Default: "
                                      "actor_rollout_ref.rollout.val_kwargs.temperature, else the agent's."),
    n: int = typer.Option(None, "--n", min=0, help="Sampled runs per task (K of mean@K, pass@K, maj@K; 0: none). "
                          "Default: val_kwargs.n (1)."),
    greedy: bool = typer.Option(None, "--greedy/--no-greedy", help="Also a greedy pass (greedy@1). Default: on "
                                "for --split test and val, off for --split train."),
    split: str = typer.Option("test", "--split", help="test (held out from training and from choosing settings: "
                              "the split for claims), val (held-out tasks settings are chosen on) or train (collect "
                              "rollouts, e.g. for best-of-n SFT)."),
    run_id: str = typer.Option(None, "--run-id", help="Store run of the sessions (default: <run_name>-eval-<time>; "
                               "with --compare, -A and -B are appended)."),
    output: Path = typer.Option(None, "--output", help="Also write the whole answer, each task's outcomes "
                                "included, to this JSON file."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
    reproducible: bool = typer.Option(True, "--reproducible/--job-engine", help="On the CPU, serve with the "
                                      "engine's exact prefill (engine.exact), so that the greedy pass gives the same "
                                      "episodes every time on this machine, whatever runs beside it; --job-engine: the "
                                      "job's own engine settings (as its rollouts and validation run)."),
) -> None:
    """Evaluate a checkpoint (greedy@1, mean@K, pass@K, maj@K with 95% intervals), or compare two."""
    import asyncio

    # lazy: the trainer extra (torch, verl) stays off --help
    from agentr1.trainer import compare_evaluations, comparison_table, evaluate_checkpoint, metrics_table

    if split not in ("test", "val", "train"):
        _fail(f"--split must be test, val or train, not {split!r}")
    if compare and checkpoint is not None:
        _fail("give --checkpoint or --compare A B, not both")
    job: Any = load_job(config, overrides)
    protocol = _protocol(job, temperature=temperature, n=n, greedy=split != "train" if greedy is None else greedy)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    def one(model: str | None, suffix: str = "") -> dict[str, Any]:
        rid = f"{run_id}{suffix}" if run_id else None
        title = None if quiet else " ".join(["eval", suffix.strip("-"), split] if suffix else ["eval", split])
        try:
            return asyncio.run(evaluate_checkpoint(job, model, split=split, protocol=protocol, run_id=rid,
                                                   progress_title=title, reproducible=reproducible))
        except ValueError as exc:
            if f"no {split} tasks" not in str(exc):
                raise
            _fail(f"{exc} (or evaluate another split: --split val)")

    if not compare:
        answer = one(checkpoint)
        typer.echo(metrics_table(answer), err=True)
        _emit(answer, output)
        return
    a, b = one(compare[0], "-A"), one(compare[1], "-B")
    tests = compare_evaluations(a, b)
    typer.echo(f"A = {a['model']}\nB = {b['model']}\n{comparison_table(tests, a_name='A', b_name='B')}", err=True)
    _emit({"a": a, "b": b, "paired": [t.__dict__ for t in tests]}, output)


def _protocol(job: Any, *, temperature: float | None, n: int | None, greedy: bool) -> Any:
    from pydantic import ValidationError

    # lazy: the trainer extra stays off --help
    from agentr1.trainer import ValidationSampling

    base = job.actor_rollout_ref.rollout.val_kwargs
    try:
        return ValidationSampling(greedy=greedy, n=base.n if n is None else n,
                                  temperature=base.temperature if temperature is None else temperature)
    except ValidationError as exc:
        _fail(f"nothing to evaluate: {exc.errors()[0]['msg']} (give --n 1 or more, or --greedy)")


def _emit(answer: dict[str, Any], output: Path | None) -> None:
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(answer, indent=1))
    typer.echo(json.dumps(_without_details(answer)))


def _without_details(answer: Any) -> Any:
    if isinstance(answer, dict):
        return {k: _without_details(v) for k, v in answer.items() if k != _DETAIL}
    return answer


def _fail(message: str) -> NoReturn:
    typer.secho(f"error: {message}", fg="red", err=True)
    raise typer.Exit(2)
