"""The training loop: setup -> train -> save/cleanup, one screen per phase.

Each step: data (rollout through the gateway + reward, or stored sessions) -> replay (exact-token
rows from the store) -> advantages -> update (verl) -> weight sync -> bookkeeping. There is one
loop; where a step's sessions come from is its source (``agentr1.trainer.sources``): synchronous
rollouts, the asynchronous producer (``trainer.mode: async``) or stored traces (``offline``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import logging
import time
from pathlib import Path
from typing import Any

from agentr1.core import process_memory, release_freed_memory, resolve_model
from agentr1.sdk import configure
from agentr1.store import ImageStore, TraceStore, normalize_url
from agentr1.trainer.agent_session import use_session_threads
from agentr1.trainer.algorithms import AdvantageConfig, compute_batch_advantages, get_adv_estimator
from agentr1.trainer.async_loop import AsyncRollouts
from agentr1.trainer.batch import BatchConfig, build_rows
from agentr1.trainer.checkpoints import TrainerState, latest_checkpoint, save_checkpoint
from agentr1.trainer.config import JobConfig
from agentr1.trainer.distill import build_distiller
from agentr1.trainer.evaluate import run_protocol
from agentr1.trainer.groups import GroupCompleter, resampler
from agentr1.trainer.offline import OfflineSource, OfflineSteps
from agentr1.trainer.padded import PaddedBatch
from agentr1.trainer.rollout import AgentRunner
from agentr1.trainer.scoring import Scorer, outcome_metrics
from agentr1.trainer.serving import Serving, start_serving
from agentr1.trainer.sources import StepData, StepSource, SyncRollouts
from agentr1.trainer.tasks import TaskSampler, load_tasks
from agentr1.trainer.tracking import Tracker, tracking_options

__all__ = ["StepData", "Trainer", "advantage_config", "policy_config"]

log = logging.getLogger("agentr1.trainer")


class Trainer:
    """One RL job: :meth:`setup`, :meth:`train` (the loop over its :attr:`source`), :meth:`close`."""

    def __init__(self, config: JobConfig, *, quiet: bool = False) -> None:
        self.config, self.quiet, self.out_dir = config, quiet, Path(config.trainer.default_local_dir)

    # -- setup --------------------------------------------------------------------------------

    def setup(self) -> None:
        from agentr1.trainer.policy.ray_policy import policy_for  # torch and verl: loaded here

        cfg = self.config
        self.out_dir.mkdir(parents=True, exist_ok=True)
        dumped = cfg.dump()
        (self.out_dir / "config.json").write_text(json.dumps(dumped, indent=2))
        self.store = TraceStore.open(cfg.db)
        self.model_path = resolve_model(cfg.actor_rollout_ref.model)
        resume = latest_checkpoint(self.out_dir) if cfg.trainer.resume else None
        self.state = TrainerState.load(resume) if resume else TrainerState(run_id=f"{cfg.run_name}-{int(time.time())}")
        self.policy = policy_for(self.model_path, policy_config(cfg), cfg.trainer)
        # the config that runs: the memory settings as "auto" resolved them on this machine (policy/memory_budget.py)
        dumped["actor_rollout_ref"]["actor"].update(self.policy.memory_plan.settings())
        (self.out_dir / "config.json").write_text(json.dumps(dumped, indent=2))
        # rows of a vision-language model name their images by hash: read them where the sessions are stored
        self.policy.image_store = (ImageStore.for_database(normalize_url(cfg.offline.db)) if cfg.offline is not None
                                   else self.store.images)
        serve_from = self.model_path
        if resume is not None:
            # checkpoints of earlier versions keep the policy's state in engine/ (now policy/)
            self.policy.load_checkpoint(resume / "policy" if (resume / "policy").is_dir() else resume / "engine")
            serve_from = resume / "hf"
            log.info("resuming %s from %s (step %d)", self.state.run_id, resume, self.state.step)
            # rollouts the interruption cut short stay running: mark them (they are never trained on)
            self.store.abandon_stale(dt.datetime.now(dt.UTC), run_id=self.state.run_id)
        self.store.ensure_run(self.state.run_id, cfg.run_name)
        self.scorer = Scorer.for_job(cfg, self.store, self.state.run_id)  # reward functions (+ judge)
        self.serving: Serving | None = None
        # the engine's counters and the clock when the current step's window began
        self._engine_mark: tuple[float, dict[str, float]] = (time.monotonic(), {})
        if cfg.offline is not None:  # train on stored sessions: no serving, no rollouts, no evaluation
            # the selection as of the run's first start, so the resumed cursor points at the same groups
            self.state.offline_as_of = self.state.offline_as_of or dt.datetime.now(dt.UTC).isoformat()
            offline = OfflineSource(cfg.offline, cfg.data.train_batch_size, self.scorer.reward_config,
                                    as_of=dt.datetime.fromisoformat(self.state.offline_as_of))
            self.train_tasks, self.val_tasks = [], []
        else:
            self.train_tasks = load_tasks(cfg.data, "train")  # bad task files fail before any server starts
            held_out = cfg.trainer.eval_split  # the trainer's evaluations: val, or test for a run that chooses nothing
            has_files = cfg.data.test_files if held_out == "test" else cfg.data.val_files
            self.val_tasks = load_tasks(cfg.data, held_out) if (has_files or cfg.data.generator) else []
            # the gateway in front of the embedded engine or SGLang / vLLM servers (rollout.name)
            self.serving = start_serving(cfg, self.store, self.model_path, serve_from, run_id=self.state.run_id,
                                         policy_version=self.state.policy_version, log_dir=self.out_dir / "servers")
            self.state.policy_version = asyncio.run(self.serving.align(self.policy, self.state.policy_version))
            configure(self.serving.url)
        gateways = self.serving.rollout_urls if self.serving is not None else None
        self.runner = AgentRunner(cfg.agent, gateways=gateways) if cfg.agent is not None else None
        # failed members: incomplete groups dropped, or their missing samples run again by the runner
        self.groups = GroupCompleter(cfg, resample=None if self.runner is None else
                                     resampler(self.runner, self.scorer, run_id=self.state.run_id))
        self.distiller = build_distiller(cfg, self.model_path, self.policy) if cfg.algorithm.distill else None
        self.sampler = TaskSampler(self.train_tasks, shuffle=cfg.data.shuffle, seed=cfg.data.seed,
                                   position=self.state.sampler_position)
        self.tracker = Tracker(self.out_dir, cfg.trainer.total_training_steps, start_step=self.state.step,
                               quiet=self.quiet,
                               **tracking_options(cfg.trainer, cfg.run_name, dumped))
        self.source: StepSource = (OfflineSteps(self, offline) if cfg.offline is not None
                                   else AsyncRollouts(self, self.out_dir) if cfg.trainer.mode == "async"
                                   else SyncRollouts(self))

    # -- train --------------------------------------------------------------------------------

    def train(self) -> dict[str, float]:
        return asyncio.run(self._train())

    async def _train(self) -> dict[str, float]:
        cfg = self.config.trainer
        last: dict[str, float] = {}
        # room for max_concurrency sync sessions of the rollout and as many of the evaluation beside it
        use_session_threads(2 * self.config.actor_rollout_ref.rollout.max_concurrency)
        # the held-out evaluation before training runs beside the first step's rollout (both are sampled
        # from the starting policy, one engine batch serves them) and ends before the first update
        before: asyncio.Task[dict[str, float]] | None = None
        self._engine_mark = (time.monotonic(), self.serving.engine_counters() if self.serving is not None else {})
        if self.state.step == 0 and self.val_tasks:
            before = asyncio.create_task(self.evaluate())
        try:
            await self.source.start()
            while self.state.step < cfg.total_training_steps:
                step = self.state.step + 1
                started, at_start = time.monotonic(), process_memory()
                data = await self.source.take(step)  # 1-2. rollout and reward (or stored sessions)
                after_rollout = process_memory()
                if before is not None:
                    self.tracker.log(0, await before)
                    before = None
                metrics = await self.learn(data)
                metrics.update(peak_rises(at_start, after_rollout, process_memory()))
                self.source.after_update(step, data, metrics)
                metrics["perf/step_s"] = time.monotonic() - started
                await self.end_step(step, metrics)
                last = metrics
            if before is not None:  # no training step to run beside it (a run of 0 steps)
                self.tracker.log(0, await before)
        finally:
            if before is not None and not before.done():
                before.cancel()
            await self.source.close()
        return last

    async def learn(self, data: StepData) -> dict[str, float]:
        """Steps 3-6 of a training step: rows, advantages, update, weight sync. Returns the step's
        metrics (``data.metrics`` included)."""
        # 3. replay: exact-token rows from the stored steps, padded into tensors once (advantages, the teacher, the
        #    update and the critic read and write those)
        built = build_rows(data.sessions, BatchConfig(layout=self.config.algorithm.layout,
                                                      max_length=self.config.actor_rollout_ref.actor.max_length),
                           rewards=data.rewards)
        metrics = {**data.metrics, **self.groups.take_metrics(), **self.scorer.take_metrics(),
                   **{f"batch/{k}": float(v) for k, v in built.metrics.items()}}
        if not built.rows:
            return metrics
        batch = await asyncio.to_thread(self.policy.pad, built.rows)
        # 4. advantages (values from the critic when the estimator needs them; a teacher's when distilling)
        if get_adv_estimator(self.config.algorithm.adv_estimator).needs_values:
            batch.extra["values"] = await asyncio.to_thread(self.policy.critic_values, batch)
        metrics.update(compute_batch_advantages(batch, advantage_config(self.config)))
        if self.distiller is not None:
            metrics.update(await asyncio.to_thread(self.distiller.apply, batch))
        # 5. update the policy (and the critic) through verl
        temperature = self.config.actor_rollout_ref.rollout.temperature
        trained: PaddedBatch | None = None
        if self.state.step >= self.config.trainer.critic_warmup:  # the first critic_warmup steps: critic only
            trained = batch
            if self.config.actor_rollout_ref.actor.skip_zero_advantage:
                trained = rows_with_signal(batch)
                metrics["actor/rows_skipped"] = float(len(batch) - (len(trained) if trained is not None else 0))
            if trained is not None:
                if self.serving is not None and self.config.trainer.mode != "async":  # no rollout runs meanwhile
                    metrics["memory/kv_cache_released_gb"] = await self.serving.release_cache() / 2**30
                metrics.update(await asyncio.to_thread(self.policy.update, trained, temperature=temperature))
        if self.policy.critic is not None:
            metrics.update(await asyncio.to_thread(self.policy.update_critic, batch))
        if trained is None:  # the policy did not change: the servers keep their weights, their prefixes, the version
            # no update phase gives back what this step freed (its log-prob pass, the batch): the next rollout would
            # grow beside it (the float32 demo: 1.4 GB kept, the run's peak, after steps without an update)
            release_freed_memory(keep_bytes=0)
            return metrics
        # 6. weights to the serving backend: later steps record the new policy version
        if self.serving is not None:
            self.state.policy_version = await self.serving.sync(self.policy)
        else:
            self.state.policy_version += 1
        return metrics

    async def end_step(self, step: int, metrics: dict[str, float]) -> None:
        """Bookkeeping after an update: state, evaluation, metrics, checkpoint."""
        cfg = self.config.trainer
        metrics["policy_version"] = float(self.state.policy_version)
        self.state.step, self.state.sampler_position = step, self.sampler.position
        if cfg.test_freq and step % cfg.test_freq == 0 and step < cfg.total_training_steps and self.val_tasks:
            metrics.update(await self.evaluate())
        if step == cfg.total_training_steps and self.val_tasks:
            metrics.update(await self.evaluate())
        metrics.update({f"memory/{name}": value for name, value in process_memory().items()})
        if self.serving is not None:
            now, counters = time.monotonic(), self.serving.engine_counters()
            metrics.update(engine_metrics(self._engine_mark[1], counters, now - self._engine_mark[0]))
            self._engine_mark = (now, counters)  # the next step's window starts here
        self.tracker.log(step, metrics)
        if (cfg.save_freq and step % cfg.save_freq == 0) or step == cfg.total_training_steps:
            save_checkpoint(self.out_dir, self.policy, self.state)

    async def evaluate(self) -> dict[str, float]:
        """Held-out metrics of the current policy under the evaluation protocol (``rollout.val_kwargs``: a greedy
        pass and n samples a task): ``val-core/<source>/acc/...`` (greedy@1, mean@n, pass@n, maj@n with their
        intervals), ``success/val`` and ``reward/val`` of the sampled runs, ``success/val_greedy`` of the greedy."""
        rollout = self.config.actor_rollout_ref.rollout
        self.tracker.status(f"evaluating on {len(self.val_tasks)} held-out tasks")
        assert self.runner is not None
        run = await run_protocol(self.runner, self.val_tasks, self.scorer, rollout.val_kwargs,
                                 run_id=f"{self.state.run_id}-eval", step=self.state.step,
                                 max_concurrency=rollout.max_concurrency, source=self.config.run_name,
                                 switch_interval_s=rollout.switch_interval_s)
        metrics = dict(run.metrics)
        if run.sampled is not None:
            metrics.update(outcome_metrics(run.sampled.sessions, run.sampled.rewards, success_key="success/val",
                                           reward_key="reward/val"))
        if run.greedy is not None:
            metrics.update(outcome_metrics(run.greedy.sessions, run.greedy.rewards, success_key="success/val_greedy",
                                           reward_key="reward/val_greedy"))
        return metrics

    # -- save / cleanup -----------------------------------------------------------------------

    def close(self) -> None:
        plot = self.tracker.plot()
        if plot is not None:
            log.info("curves: %s", plot)
        self.tracker.close()
        if self.runner is not None:
            self.runner.close()
        if self.serving is not None:
            self.serving.close()
        self.store.close()


def peak_rises(at_start: dict[str, float], after_rollout: dict[str, float],
               after_update: dict[str, float]) -> dict[str, float]:
    """How far a step's rollout (the held-out evaluation beside the first one included) and its update with the
    weight sync raised the process's memory high-water mark, GiB (``memory/peak_rise_*``; ``memory/peak_gb`` is the
    mark itself): which phase sets a run's peak memory. Empty where :func:`process_memory` reads nothing."""
    if not at_start or not after_rollout or not after_update:
        return {}
    return {"memory/peak_rise_rollout_gb": after_rollout["peak_gb"] - at_start["peak_gb"],
            "memory/peak_rise_update_gb": after_update["peak_gb"] - after_rollout["peak_gb"]}


def engine_metrics(before: dict[str, float], after: dict[str, float], wall_s: float) -> dict[str, float]:
    """``engine/*``: what the embedded engine did between two counter readings ``wall_s`` seconds apart (a
    step with its rollout, update and evaluations): forward passes, decode steps, prompt tokens prefilled
    and cached, tokens generated, busy seconds, and ``engine/busy_share`` of the wall time. Empty when the
    backend keeps no counters."""
    out = {f"engine/{name}": value - before.get(name, 0.0) for name, value in after.items()
           if name != "max_batch_rows"}
    if out and wall_s > 0:
        out["engine/busy_share"] = out["engine/busy_s"] / wall_s
    return out


def rows_with_signal(batch: PaddedBatch) -> PaddedBatch | None:
    """The rows with a non-zero advantage somewhere (``actor.skip_zero_advantage``), padded as they would be
    alone; None when there is none."""
    keep = (batch.extra["advantages"] != 0).any(dim=1).nonzero().flatten().tolist()
    return batch.select(keep).trimmed() if keep else None


# the YAML actor section's own settings, read by the trainer (agentr1.trainer.batch, rows_with_signal), not the policy
TRAINER_ACTOR_FIELDS = frozenset({"max_length", "skip_zero_advantage"})
RENAMED_ACTOR_FIELDS = {"grad_clip": "clip_grad"}  # verl's actor.grad_clip is the policy's optimizer clip_grad


def policy_config(cfg: JobConfig) -> Any:
    """The policy's settings: the actor section passed through under its (verl's) names, ``optim.*`` and
    ``policy_loss.loss_mode`` flattened as the policy names them, 0 batch sizes meaning "not set"; then the
    critic's, the device's and the rollout correction's settings from their own sections."""
    from agentr1.trainer.policy import PolicyConfig

    actor = cfg.actor_rollout_ref.actor
    section = {**actor.model_dump(exclude={"optim", "policy_loss", *TRAINER_ACTOR_FIELDS}),
               **actor.optim.model_dump(), "loss_mode": actor.policy_loss.loss_mode}
    values = {RENAMED_ACTOR_FIELDS.get(name, name): value for name, value in section.items()}
    known = {f.name for f in dataclasses.fields(PolicyConfig)}
    unknown = sorted(set(values) - known)
    if unknown:  # a new actor field must reach the policy, or be declared the trainer's own above
        raise ValueError(f"actor_rollout_ref.actor fields {unknown} have no policy setting")
    for name in ("ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu"):
        values[name] = values[name] or None
    bypass = cfg.algorithm.rollout_correction.bypass_mode
    return PolicyConfig(
        **values, device=cfg.trainer.device,
        critic=get_adv_estimator(cfg.algorithm.adv_estimator).needs_values, seed=cfg.trainer.seed,
        critic_lr=cfg.critic.optim.lr, critic_warmup_steps=cfg.critic.optim.lr_warmup_steps,
        cliprange_value=cfg.critic.cliprange_value,
        # sessions sampled by an older policy (stored, or in flight during an async update): IS weights,
        # unless the rollout log-probs are the PPO ratio's anchor themselves (bypass_mode)
        bypass_mode=bypass,
        rollout_is="token" if (cfg.offline is not None or cfg.trainer.mode == "async") and not bypass else None,
    )


def advantage_config(cfg: JobConfig) -> AdvantageConfig:
    algo = cfg.algorithm
    return AdvantageConfig(adv_estimator=algo.adv_estimator, gamma=algo.gamma, lam=algo.lam,
                           norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
                           step_advantage_w=algo.gigpo_step_weight, advantage_floor=algo.advantage_floor)
