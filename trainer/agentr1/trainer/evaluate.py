"""Rollouts scored and summarised: the one place a set of tasks is run, scored and turned into
success / reward metrics, for the training loop (train and held-out metrics) and ``agentr1 eval``.

`agentr1 eval` (:func:`evaluate_checkpoint`) serves a checkpoint through an embedded gateway and
measures held-out success. With ``split="train"`` and ``n`` samples per task it is also how the
policy's own rollouts are collected into a store run for rejection sampling / best-of-n SFT
(``agentr1 sft``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentr1.gateway import EmbeddedGateway, GatewaySettings
from agentr1.sdk import INFRASTRUCTURE_KINDS, configure, failure_kind_of_error
from agentr1.store import SessionRecord, TraceStore
from agentr1.trainer.config import JobConfig
from agentr1.trainer.rewards import RewardConfig, SessionRewards
from agentr1.trainer.rollout import AgentRunner, RolloutReport, collect, use_session_threads
from agentr1.trainer.scoring import build_reward_fns, score_sessions
from agentr1.trainer.tasks import load_tasks

__all__ = ["Scored", "Scorer", "evaluate_checkpoint", "outcome_metrics", "run_and_score"]


@dataclass
class Scorer:
    """The reward stage of a job: its reward functions (and judge) over finished sessions, stored."""

    store: TraceStore
    reward_fns: dict[str, Callable[..., Any]]
    reward_config: RewardConfig

    @classmethod
    def for_job(cls, job: JobConfig, store: TraceStore, run_id: str) -> Scorer:
        return cls(store, build_reward_fns(job.reward, store, run_id),
                   RewardConfig(outcome_placement=job.reward.outcome_placement))

    def score(self, session_ids: list[str], tasks: dict[str, dict[str, Any]]
              ) -> tuple[list[SessionRecord], dict[str, SessionRewards]]:
        return score_sessions(self.store, session_ids, tasks, self.reward_fns, self.reward_config)


@dataclass
class Scored:
    report: RolloutReport
    sessions: list[SessionRecord]
    rewards: dict[str, SessionRewards]


def outcome_metrics(sessions: Sequence[SessionRecord], rewards: dict[str, SessionRewards], *,
                    success_key: str, reward_key: str) -> dict[str, float]:
    """Success (the share of sessions with a positive outcome) and the mean outcome, over the sessions
    the policy is answerable for: one that failed for an infrastructure reason (the SDK's failure kinds
    timeout, backend, environment, cancelled) is left out and counted under ``<success_key>/infra_failed``;
    any other session that did not finish counts as outcome 0. No sessions: both 0."""
    judged = [s for s in sessions if s.status == "finished" or failure_kind_of_error(s.error) not in INFRASTRUCTURE_KINDS]
    outcomes = [rewards[s.id].outcome if s.status == "finished" else 0.0 for s in judged]
    n = max(1, len(outcomes))
    return {success_key: sum(o > 0 for o in outcomes) / n, reward_key: sum(outcomes) / n,
            f"{success_key}/infra_failed": float(len(sessions) - len(judged))}


async def run_and_score(runner: AgentRunner, tasks: list[dict[str, Any]], scorer: Scorer, *, n: int, run_id: str,
                        step: int, max_concurrency: int, switch_interval_s: float | None = None) -> Scored:
    """``n`` samples of the agent per task (a group per task), then the reward stage over them."""
    report = await collect(runner, tasks, n=n, run_id=run_id, step=step, max_concurrency=max_concurrency,
                           switch_interval_s=switch_interval_s)
    sessions, rewards = await asyncio.to_thread(scorer.score, report.sessions, {t["id"]: t for t in tasks})
    return Scored(report, sessions, rewards)


async def evaluate_checkpoint(job: JobConfig, checkpoint: str | None, *, split: str = "val", n: int = 1,
                              run_id: str | None = None) -> dict[str, Any]:
    from agentr1.core import resolve_model

    if job.agent is None:
        raise ValueError("evaluation needs `agent` in the config")
    if split not in ("train", "val") or n < 1:
        raise ValueError(f"split must be 'train' or 'val' and n >= 1, got {split!r}, {n}")
    tasks = load_tasks(job.data, split)
    model = resolve_model(checkpoint or job.actor_rollout_ref.model)
    run_id = run_id or f"{job.run_name}-eval-{int(time.time())}"
    store = TraceStore.open(job.db)
    settings = GatewaySettings(db=job.db, accept_any_model=True, default_run=run_id, model=str(model),
                               device=job.trainer.device, served_model_name="policy")
    use_session_threads(job.actor_rollout_ref.rollout.max_concurrency)
    try:
        with EmbeddedGateway(settings, store=store) as gateway:
            configure(gateway.url)
            runner = AgentRunner(job.agent)
            try:
                scored = await run_and_score(runner, tasks, Scorer.for_job(job, store, run_id), n=n, run_id=run_id,
                                             step=0, max_concurrency=job.actor_rollout_ref.rollout.max_concurrency,
                                             switch_interval_s=job.actor_rollout_ref.rollout.switch_interval_s)
            finally:
                runner.close()
    finally:
        store.close()
    return {"model": str(model), "run_id": run_id, "split": split, "tasks": len(tasks),
            "samples": len(scored.sessions), "failed": scored.report.failed,
            **outcome_metrics(scored.sessions, scored.rewards, success_key="success", reward_key="reward")}
