"""The training loop: setup -> train -> save/cleanup, one screen per phase.

Each step: rollout (the agent through the gateway) -> reward (environment functions, stored) ->
replay (exact-token rows from the store) -> advantages -> update (verl) -> weight sync.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentr1.sdk import configure
from agentr1.store import SessionRecord, TraceStore
from agentr1.trainer.algorithms import AdvantageConfig, compute_advantages, get_adv_estimator
from agentr1.trainer.batch import BatchConfig, build_rows
from agentr1.trainer.checkpoints import TrainerState, latest_checkpoint, save_checkpoint
from agentr1.trainer.config import JobConfig
from agentr1.trainer.distill import build_distiller
from agentr1.trainer.offline import OfflineSource
from agentr1.trainer.rewards import RewardConfig, SessionRewards
from agentr1.trainer.rollout import AgentRunner, collect
from agentr1.trainer.groups import GroupCompleter
from agentr1.trainer.scoring import build_reward_fns, score_sessions
from agentr1.trainer.tasks import TaskSampler, load_tasks
from agentr1.trainer.tracking import Tracker

log = logging.getLogger("agentr1.trainer")


@dataclass
class StepData:
    sessions: list[SessionRecord]
    rewards: dict[str, SessionRewards]
    metrics: dict[str, float]


class Trainer:
    def __init__(self, config: JobConfig, *, quiet: bool = False) -> None:
        self.config = config
        self.quiet = quiet
        self.out_dir = Path(config.trainer.default_local_dir)

    # -- setup --------------------------------------------------------------------------------

    def setup(self) -> None:
        from agentr1.core import resolve_model
        from agentr1.trainer.engine.ray_engine import policy_engine_for
        from agentr1.trainer.serving import start_serving

        cfg = self.config
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "config.json").write_text(json.dumps(cfg.dump(), indent=2))
        self.store = TraceStore.open(cfg.db)
        self.model_path = resolve_model(cfg.actor_rollout_ref.model)
        resume = latest_checkpoint(self.out_dir) if cfg.trainer.resume else None
        self.state = TrainerState.load(resume) if resume else TrainerState(run_id=f"{cfg.run_name}-{int(time.time())}")
        self.engine = policy_engine_for(self.model_path, engine_config(cfg), cfg.trainer)
        serve_from = self.model_path
        if resume is not None:
            self.engine.load_checkpoint(resume / "engine")
            serve_from = resume / "hf"
            log.info("resuming %s from %s (step %d)", self.state.run_id, resume, self.state.step)
            # rollouts the interruption cut short stay running: mark them (they are never trained on)
            self.store.abandon_stale(dt.datetime.now(dt.UTC), run_id=self.state.run_id)
        self.store.ensure_run(self.state.run_id, cfg.run_name)
        self.reward_config = RewardConfig(outcome_placement=cfg.reward.outcome_placement)
        self.reward_fns = build_reward_fns(cfg.reward, self.store, self.state.run_id)  # functions (+ judge)
        self.groups = GroupCompleter(cfg)  # failed members: incomplete groups dropped or resampled
        if cfg.offline is not None:  # train on stored sessions: no serving, no rollouts, no evaluation
            # the selection as of the run's first start, so the resumed cursor points at the same groups
            self.state.offline_as_of = self.state.offline_as_of or dt.datetime.now(dt.UTC).isoformat()
            self.offline: OfflineSource | None = OfflineSource(
                cfg.offline, cfg.data.train_batch_size, self.reward_config,
                as_of=dt.datetime.fromisoformat(self.state.offline_as_of))
            self.serving = None
            self.train_tasks, self.val_tasks = [], []
        else:
            self.offline = None
            self.train_tasks = load_tasks(cfg.data, "train")  # bad task files fail before any server starts
            self.val_tasks = load_tasks(cfg.data, "val") if (cfg.data.val_files or cfg.data.generator) else []
            # the gateway in front of the embedded engine or SGLang / vLLM servers (rollout.name)
            self.serving = start_serving(cfg, self.store, self.model_path, serve_from, run_id=self.state.run_id,
                                         policy_version=self.state.policy_version, log_dir=self.out_dir / "servers")
            self.state.policy_version = asyncio.run(self.serving.align(self.engine, self.state.policy_version))
            configure(self.serving.url)
        self.runner = AgentRunner(cfg.agent) if cfg.agent is not None else None
        self.distiller = build_distiller(cfg, self.model_path, self.engine) if cfg.algorithm.distill else None
        self.sampler = TaskSampler(self.train_tasks, shuffle=cfg.data.shuffle, seed=cfg.data.seed,
                                   position=self.state.sampler_position)
        self.tracker = Tracker(self.out_dir, cfg.trainer.total_training_steps, start_step=self.state.step,
                               quiet=self.quiet)

    # -- train --------------------------------------------------------------------------------

    def train(self) -> dict[str, float]:
        if self.config.trainer.mode == "async":
            from agentr1.trainer.async_loop import AsyncTrainLoop

            return asyncio.run(AsyncTrainLoop(self).run())
        return asyncio.run(self._train())

    async def _train(self) -> dict[str, float]:
        cfg = self.config.trainer
        last: dict[str, float] = {}
        # sync agents run in the default executor (min(32, cpus + 4) threads): room for max_concurrency
        workers = self.config.actor_rollout_ref.rollout.max_concurrency + 4
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=workers))
        if self.state.step == 0 and self.val_tasks:
            self.tracker.log(0, await self.evaluate())
        while self.state.step < cfg.total_training_steps:
            step = self.state.step + 1
            started = time.monotonic()
            # 1-2. rollout and reward: new sessions of the current policy (or stored ones, offline)
            data = self._offline_data() if self.offline is not None else await self._rollout(step)
            metrics = await self._learn(data)
            metrics["perf/step_s"] = time.monotonic() - started
            await self._end_step(step, metrics)
            last = metrics
        return last

    async def _learn(self, data: StepData) -> dict[str, float]:
        """Steps 3-6 of a training step (shared with the asynchronous loop): rows, advantages,
        update, weight sync. Returns the step's metrics (``data.metrics`` included)."""
        # 3. replay: exact-token rows from the stored steps
        batch = build_rows(data.sessions, BatchConfig(layout=self.config.algorithm.layout,
                                                      max_length=self.config.actor_rollout_ref.actor.max_length),
                           rewards=data.rewards)
        metrics = {**data.metrics, **self.groups.take_metrics(),
                   **{f"batch/{k}": float(v) for k, v in batch.metrics.items()}}
        if not batch.rows:
            return metrics
        # 4. advantages (values from the critic when the estimator needs them; a teacher's when distilling)
        if get_adv_estimator(self.config.algorithm.adv_estimator).needs_values:
            values = await asyncio.to_thread(self.engine.compute_values, batch.rows)
            for row, v in zip(batch.rows, values, strict=True):
                row.values = v
        metrics.update(compute_advantages(batch.rows, advantage_config(self.config)))
        if self.distiller is not None:
            metrics.update(await asyncio.to_thread(self.distiller.apply, batch.rows))
        # 5. update the policy (and the critic) through verl
        temperature = self.config.actor_rollout_ref.rollout.temperature
        if self.state.step >= self.config.trainer.critic_warmup:  # the first critic_warmup steps: critic only
            metrics.update(await asyncio.to_thread(self.engine.update, batch.rows, temperature=temperature))
        if self.engine.critic is not None:
            metrics.update(await asyncio.to_thread(self.engine.update_critic, batch.rows))
        # 6. weights to the serving backend: later steps record the new policy version
        if self.serving is not None:
            self.state.policy_version = await self.serving.sync(self.engine)
        else:
            self.state.policy_version += 1
        return metrics

    async def _end_step(self, step: int, metrics: dict[str, float]) -> None:
        """Bookkeeping after an update (shared with the asynchronous loop): state, evaluation,
        metrics, checkpoint."""
        cfg = self.config.trainer
        metrics["policy_version"] = float(self.state.policy_version)
        self.state.step, self.state.sampler_position = step, self.sampler.position
        if cfg.test_freq and step % cfg.test_freq == 0 and step < cfg.total_training_steps and self.val_tasks:
            metrics.update(await self.evaluate())
        if step == cfg.total_training_steps and self.val_tasks:
            metrics.update(await self.evaluate())
        self.tracker.log(step, metrics)
        if (cfg.save_freq and step % cfg.save_freq == 0) or step == cfg.total_training_steps:
            save_checkpoint(self.out_dir, self.engine, self.state)

    async def _rollout(self, step: int) -> StepData:
        rollout = self.config.actor_rollout_ref.rollout
        assert self.runner is not None
        tasks = self.sampler.take(self.config.data.train_batch_size)
        self.tracker.status(f"rollout: {len(tasks)} tasks x {rollout.n}")
        report = await collect(self.runner, tasks, n=rollout.n, run_id=self.state.run_id, step=step,
                               max_concurrency=rollout.max_concurrency)
        for error in report.errors:
            log.warning("rollout failure: %s", error)
        sessions, rewards = await asyncio.to_thread(self._score, report.sessions, {t["id"]: t for t in tasks})
        sessions, rewards = await self.groups.complete(self, {t["id"]: t for t in tasks}, sessions, rewards, step=step)
        min_version = self.state.policy_version - rollout.max_staleness
        fresh = [s for s in sessions if s.status == "finished" and s.policy_version >= min_version]
        outcomes = [rewards[s.id].outcome for s in fresh]
        return StepData(fresh, {s.id: rewards[s.id] for s in fresh}, {
            "rollout/sessions": float(len(report.sessions)), "rollout/failed": float(report.failed),
            "rollout/timed_out": float(report.timed_out), "rollout/stale": float(len(sessions) - len(fresh)),
            "rollout/seconds": report.seconds,
            "reward/mean": sum(outcomes) / len(outcomes) if outcomes else 0.0,
            "success/train": sum(o > 0 for o in outcomes) / len(outcomes) if outcomes else 0.0,
        })

    def _score(self, session_ids: list[str], tasks: dict[str, dict[str, Any]]
               ) -> tuple[list[SessionRecord], dict[str, SessionRewards]]:
        return score_sessions(self.store, session_ids, tasks, self.reward_fns, self.reward_config)

    def _offline_data(self) -> StepData:
        assert self.offline is not None
        sessions, rewards, metrics = self.offline.take(self.state.offline_cursor)
        self.state.offline_cursor += self.config.data.train_batch_size
        return StepData(sessions, rewards, metrics)

    async def evaluate(self) -> dict[str, float]:
        """Held-out success: one sample per validation task with the current policy."""
        self.tracker.status(f"evaluating on {len(self.val_tasks)} held-out tasks")
        assert self.runner is not None
        report = await collect(self.runner, self.val_tasks, n=1, run_id=f"{self.state.run_id}-eval", step=self.state.step,
                               max_concurrency=self.config.actor_rollout_ref.rollout.max_concurrency)
        sessions, rewards = await asyncio.to_thread(self._score, report.sessions, {t["id"]: t for t in self.val_tasks})
        outcomes = [rewards[s.id].outcome if s.status == "finished" else 0.0 for s in sessions]
        return {"success/val": sum(o > 0 for o in outcomes) / max(1, len(outcomes)),
                "reward/val": sum(outcomes) / max(1, len(outcomes))}

    # -- save / cleanup -----------------------------------------------------------------------

    def close(self) -> None:
        plot = self.tracker.plot()
        if plot is not None:
            log.info("curves: %s", plot)
        self.tracker.close()
        if self.serving is not None:
            self.serving.close()
        self.store.close()


def engine_config(cfg: JobConfig) -> Any:
    from agentr1.trainer.engine import PolicyEngineConfig

    actor = cfg.actor_rollout_ref.actor
    return PolicyEngineConfig(
        lr=actor.optim.lr, weight_decay=actor.optim.weight_decay, clip_grad=actor.grad_clip,
        loss_mode=actor.policy_loss.loss_mode, clip_ratio=actor.clip_ratio, loss_agg_mode=actor.loss_agg_mode,
        entropy_coeff=actor.entropy_coeff, use_kl_loss=actor.use_kl_loss, kl_loss_coef=actor.kl_loss_coef,
        kl_loss_type=actor.kl_loss_type, ppo_epochs=actor.ppo_epochs,
        ppo_mini_batch_size=actor.ppo_mini_batch_size or None,
        ppo_micro_batch_size_per_gpu=actor.ppo_micro_batch_size_per_gpu or None,
        ppo_max_token_len_per_gpu=actor.ppo_max_token_len_per_gpu, device=cfg.trainer.device,
        critic=get_adv_estimator(cfg.algorithm.adv_estimator).needs_values, seed=cfg.trainer.seed,
        critic_lr=cfg.critic.optim.lr, critic_warmup_steps=cfg.critic.optim.lr_warmup_steps,
        cliprange_value=cfg.critic.cliprange_value,
        # sessions sampled by an older policy (stored, or in flight during an async update): IS weights
        rollout_is="token" if cfg.offline is not None or cfg.trainer.mode == "async" else None,
    )


def advantage_config(cfg: JobConfig) -> AdvantageConfig:
    algo = cfg.algorithm
    return AdvantageConfig(adv_estimator=algo.adv_estimator, gamma=algo.gamma, lam=algo.lam,
                           norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
                           step_advantage_w=algo.gigpo_step_weight)
