"""The SFT job: setup -> train -> save/cleanup, the shape of the RL loop.

setup: select demonstrations from the store, build exact-token rows (loss on actions only),
start the same policy (verl's engine) the RL trainer uses. train: ``total_epochs`` passes over the rows in
``data.train_batch_size`` chunks, one optimizer step of verl's ``sft_loss`` per chunk. Checkpoints
use the RL layout (``<dir>/checkpoints/step_<k>/hf`` is servable, ``policy/`` resumable), so
``agentr1 train`` continues from ``actor_rollout_ref.model: <dir>/checkpoints/step_<k>/hf`` and
``agentr1 gateway --model`` serves it.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentr1.core import resolve_model
from agentr1.store import TraceStore
from agentr1.trainer.checkpoints import TrainerState, save_checkpoint
from agentr1.trainer.sft.config import SFTConfig
from agentr1.trainer.sft.data import SFTRows, build_sft_rows
from agentr1.trainer.sft.selection import select_demonstrations
from agentr1.trainer.tracking import Tracker, tracking_options

if TYPE_CHECKING:
    from agentr1.trainer.policy import LocalPolicy

__all__ = ["SFTRun", "SFTTrainer", "sft_policy_config"]

log = logging.getLogger("agentr1.trainer.sft")


@dataclass
class SFTRun:
    """What :meth:`SFTTrainer.setup` builds for a run, declared in one place (each field set by setup)."""

    model_path: Path  # the model fine-tuned
    data: SFTRows  # the exact-token rows (loss on actions only)
    data_metrics: dict[str, float]  # the selection's and the rows' counts, logged with the first step
    total_steps: int  # optimizer steps: epochs x chunks, capped by trainer.total_training_steps
    policy: LocalPolicy
    progress: TrainerState  # step, run id, policy version: what a checkpoint keeps
    tracker: Tracker  # metrics, progress display, curves


class SFTTrainer:
    def __init__(self, config: SFTConfig, *, quiet: bool = False) -> None:
        self.config = config
        self.quiet = quiet
        self.out_dir = Path(config.trainer.default_local_dir)
        self.checkpoint: Path | None = None
        self._run: SFTRun | None = None

    @property
    def run(self) -> SFTRun:
        """The run's parts (rows, policy, tracking), built by :meth:`setup`."""
        if self._run is None:
            from agentr1.trainer.run_state import TrainerNotSetUp  # lazy: the RL run's parts, not needed by SFT

            raise TrainerNotSetUp("this SFT trainer is not set up: call setup() before train(), close() or reading run")
        return self._run

    # -- setup --------------------------------------------------------------------------------

    def setup(self) -> None:
        from agentr1.trainer.policy import LocalPolicy

        if self._run is not None:
            raise RuntimeError("this SFT trainer is set up already")
        cfg = self.config
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "config.json").write_text(json.dumps(cfg.dump(), indent=2))
        model_path = resolve_model(cfg.model.path)
        with TraceStore.open(cfg.data.db, migrate=False) as store:
            selection = select_demonstrations(store, cfg.data)
        renderer = None
        if cfg.data.text_steps == "render":
            # lazy: rendering loads the tokenizers' stack, only when this runs
            from agentr1.core.rendering import load_renderer

            renderer = load_renderer(model_path)
        data = build_sft_rows(selection, cfg.data, renderer)
        if not data.rows:
            raise ValueError(f"the {len(selection.sessions)} selected sessions gave no trainable rows: {data.metrics}")
        _check_micro_batches(len(data.rows), cfg.data.train_batch_size, cfg.data.micro_batch_size_per_gpu)
        data.write_manifest(self.out_dir / "sft_data.jsonl")
        steps_per_epoch = math.ceil(len(data.rows) / cfg.data.train_batch_size)
        total_steps = steps_per_epoch * cfg.trainer.total_epochs
        if cfg.trainer.total_training_steps is not None:
            total_steps = min(total_steps, cfg.trainer.total_training_steps)
        self._run = SFTRun(
            model_path=model_path, data=data, total_steps=total_steps,
            data_metrics={f"data/{k}": float(v) for k, v in {**selection.metrics, **data.metrics}.items()},
            policy=LocalPolicy(model_path, sft_policy_config(cfg, total_steps)),
            progress=TrainerState(run_id=f"{cfg.run_name}-{int(time.time())}"),
            tracker=Tracker(self.out_dir, total_steps, quiet=self.quiet,
                            **tracking_options(cfg.trainer, cfg.run_name, cfg.model_dump(mode="json"))))
        log.info("sft: %d rows (%d rendered from text) from %d sessions, %d steps", len(data.rows),
                 sum(data.rendered_from_text), len(selection.sessions), total_steps)

    # -- train --------------------------------------------------------------------------------

    def train(self) -> dict[str, float]:
        cfg, run = self.config, self.run
        rows = run.data.rows
        last: dict[str, float] = {}
        step = 0
        for epoch in range(cfg.trainer.total_epochs):
            order = list(range(len(rows)))
            if cfg.data.shuffle:
                random.Random(cfg.data.seed + epoch).shuffle(order)
            for start in range(0, len(order), cfg.data.train_batch_size):
                if step >= run.total_steps:
                    return last
                step += 1
                run.tracker.status(f"epoch {epoch + 1}/{cfg.trainer.total_epochs}")
                chunk = [rows[i] for i in order[start:start + cfg.data.train_batch_size]]
                # one optimizer step of verl's sft_loss on the chunk's action tokens
                metrics = {**run.policy.sft_update(chunk), "sft/epoch": epoch + start / len(order)}
                if step == 1:
                    metrics.update(run.data_metrics)
                run.progress.step = run.progress.policy_version = step
                run.tracker.log(step, metrics)
                if (cfg.trainer.save_freq and step % cfg.trainer.save_freq == 0) or step == run.total_steps:
                    self.checkpoint = save_checkpoint(self.out_dir, run.policy, run.progress)
                last = metrics
        return last

    # -- save / cleanup -----------------------------------------------------------------------

    def close(self) -> None:
        self.run.tracker.plot()
        self.run.tracker.close()


def sft_policy_config(cfg: SFTConfig, total_steps: int) -> Any:
    from agentr1.trainer.policy import PolicyConfig

    optim = cfg.optim
    return PolicyConfig(
        lr=optim.lr, weight_decay=optim.weight_decay, clip_grad=optim.clip_grad,
        lr_warmup_steps=int(optim.lr_warmup_steps_ratio * total_steps), lr_scheduler_type=optim.lr_scheduler_type,
        total_training_steps=max(1, total_steps), min_lr_ratio=optim.min_lr_ratio,
        ppo_micro_batch_size_per_gpu=cfg.data.micro_batch_size_per_gpu or None,
        ppo_max_token_len_per_gpu=cfg.data.max_token_len_per_gpu, calculate_entropy=False,
        gradient_checkpointing=False,  # as before "auto" (on the CPU) came to the RL update: the token budget adapts
        device=cfg.trainer.device, seed=cfg.trainer.seed,
    )


def _check_micro_batches(rows: int, batch: int, micro: int) -> None:
    """Fail before training, not at the last chunk, when fixed micro-batches do not divide the chunks."""
    sizes = {min(batch, rows), rows % batch or batch}
    if micro and any(size % micro for size in sizes):
        raise ValueError(f"data.micro_batch_size_per_gpu={micro} does not divide the chunks of {sorted(sizes)} rows "
                         f"({rows} rows, train_batch_size={batch}); choose a divisor or 0 (batch by tokens)")
