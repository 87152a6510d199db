"""Asynchronous training (``trainer.mode: async``): rollouts keep running while the policy updates.

Agent RL rollouts have long-tailed durations (tool and environment latency, long answers,
stragglers). The synchronous loop waits for the slowest sample of a step and leaves the serving
engine idle during the update. Here a producer keeps up to ``rollout.max_concurrency`` agent runs
going at all times (a new group of ``n`` samples starts as soon as ``n`` run slots are free), scores
each group when its last sample ends and queues it; each training step takes the next
``data.train_batch_size`` complete groups (:class:`AsyncRollouts`, the training loop's source in
this mode: the loop itself is the synchronous one, ``agentr1.trainer.loop``) and trains on them
through the same stages. Groups finish in any order; each is trained on at most once.

Staleness. Every step records the policy version that sampled it (the gateway does this). A
session whose calls span a weight sync has steps of versions v and v+1; its *oldest* step is the
most off-policy, so a group's behaviour version is the oldest version among its sessions' steps.
Its lag is the current policy version minus that; groups with lag > ``rollout.max_staleness`` are
dropped when taken (``async/dropped_stale``) and never reach ``policy.update``. What remains
off-policy is corrected per token with verl's rollout correction (``rollout_is="token"``:
truncated importance weights between the policy before the update and the recorded rollout
log-probs), as offline training does.

Weight sync. ``policy.sync_to(backend)`` waits only for the model calls in flight, then copies the
weights; agents between calls (in a tool, an environment step) keep running, and calls arriving
meanwhile queue for the copy's duration. The bounded queue of finished groups
(``train_batch_size * (max_staleness + 1)``) stops the producer from racing far ahead.

Checkpoint / resume. The saved sampler position is the producer's: tasks drawn but not trained at
the checkpoint (running or queued) are abandoned on resume, so no group is trained twice.
``async_groups.jsonl`` in the output directory lists, per update, the groups trained on (with their
lag) and those dropped, and the update's wall-clock window.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentr1.store import SessionRecord
from agentr1.trainer.rewards import SessionRewards
from agentr1.trainer.rollout import RolloutReport
from agentr1.trainer.scoring import outcome_metrics
from agentr1.trainer.sources import StepData, StepSource, TrainerContext

__all__ = ["AsyncRollouts", "FinishedGroup", "RolloutProducer", "behaviour_version", "split_by_staleness"]

log = logging.getLogger("agentr1.trainer.async")

MAX_EMPTY_GROUPS = 20  # consecutive groups without one finished session: the agent is broken, stop


@dataclass
class FinishedGroup:
    """The finished samples of one task, scored, with the oldest policy version that sampled them."""

    group_id: str
    task_id: str
    sessions: list[SessionRecord]
    rewards: dict[str, SessionRewards]
    report: RolloutReport
    behaviour_version: int


def behaviour_version(sessions: list[SessionRecord]) -> int:
    """The oldest policy version among the sessions' steps (the session's own when it has none)."""
    versions = [step.policy_version for s in sessions for step in s.steps]
    return min(versions or [s.policy_version for s in sessions] or [0])


def split_by_staleness(groups: list[FinishedGroup], current_version: int, max_staleness: int
                       ) -> tuple[list[FinishedGroup], list[FinishedGroup]]:
    """(fresh, stale): a group is stale when ``current_version - behaviour_version > max_staleness``."""
    fresh = [g for g in groups if current_version - g.behaviour_version <= max_staleness]
    return fresh, [g for g in groups if current_version - g.behaviour_version > max_staleness]


@dataclass
class ProducerCounters:
    launched: int = 0  # groups started
    completed: int = 0  # groups whose samples all ended
    sessions: int = 0
    failed: int = 0
    timed_out: int = 0
    empty: int = 0  # groups without a finished session (not queued)
    errors: list[str] = field(default_factory=list)


class RolloutProducer:
    """Keeps ``max_concurrency`` agent runs going: a new task group starts as soon as ``n`` run slots
    are free (a group's finished samples free theirs while its stragglers run) and the queue of
    finished groups has room; each group is queued when its last sample ends."""

    def __init__(self, trainer: TrainerContext, queue: asyncio.Queue[FinishedGroup], *, max_concurrency: int) -> None:
        self.trainer = trainer
        self.queue = queue
        self.max_concurrency = max_concurrency
        self.counters = ProducerCounters()
        self._consecutive_empty = 0

    async def run(self) -> None:
        n = self.trainer.config.actor_rollout_ref.rollout.n
        slots = asyncio.Semaphore(self.max_concurrency)
        running: set[asyncio.Task[None]] = set()
        try:
            while True:
                while self.queue.full():  # backpressure: the trainer is behind, do not race ahead
                    await asyncio.sleep(0.05)
                for _ in range(min(n, self.max_concurrency)):
                    await slots.acquire()
                task = self.trainer.run.sampler.take(1)[0]
                seq = self.counters.launched
                self.counters.launched += 1
                job = asyncio.create_task(self._group(task, seq, slots))
                running.add(job)
                job.add_done_callback(running.discard)
                if self._consecutive_empty >= MAX_EMPTY_GROUPS:
                    raise RuntimeError(f"{self._consecutive_empty} task groups in a row ended without a finished "
                                       f"session; first errors: {self.counters.errors}")
        finally:
            for job in list(running):
                job.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    async def _group(self, task: dict[str, Any], seq: int, slots: asyncio.Semaphore) -> None:
        run, counters = self.trainer.run, self.counters
        run_id = run.progress.run_id
        n = self.trainer.config.actor_rollout_ref.rollout.n
        group_id = f"{run_id}/async{seq}/{task['id']}"
        report = RolloutReport()
        held = min(n, self.max_concurrency)  # slots acquired for this group by run()

        async def sample(k: int) -> None:
            if k >= held:  # n > max_concurrency: the extra samples wait for a slot
                await slots.acquire()
            try:
                await run.runner.run(task, run_id=run_id, group_id=group_id, sample=k,  # type: ignore[union-attr]
                                     step=run.progress.step + 1, report=report)
            finally:
                slots.release()

        started = time.monotonic()
        await asyncio.gather(*(sample(k) for k in range(n)))
        report.seconds = time.monotonic() - started
        sessions, rewards = await asyncio.to_thread(run.scorer.score, report.sessions, {task["id"]: task})
        sessions, rewards = await run.groups.complete({task["id"]: task}, sessions, rewards,
                                                      step=run.progress.step + 1, unopened=report.unopened)
        counters.completed += 1
        counters.sessions += len(report.sessions)
        counters.failed += report.failed
        counters.timed_out += report.timed_out
        finished = [s for s in sessions if s.status == "finished"]
        if not finished:
            counters.empty += 1
            self._consecutive_empty += 1
            counters.errors = (counters.errors + report.errors)[:5]
            return
        self._consecutive_empty = 0
        await self.queue.put(FinishedGroup(group_id, task["id"], finished, {s.id: rewards[s.id] for s in finished},
                                           report, behaviour_version(finished)))


class AsyncRollouts(StepSource):
    """The consumer side, as the training loop's source: a step takes the next ``train_batch_size``
    fresh groups the producer (started with the first step) finished."""

    def __init__(self, trainer: TrainerContext, out_dir: Path) -> None:
        super().__init__(trainer)
        cfg = trainer.config
        rollout = cfg.actor_rollout_ref.rollout
        self.batch_size = cfg.data.train_batch_size
        self.max_staleness = rollout.max_staleness
        self.max_concurrency = rollout.max_concurrency
        self.audit_path = out_dir / "async_groups.jsonl"
        self.queue: asyncio.Queue[FinishedGroup] = asyncio.Queue(maxsize=self.batch_size * (self.max_staleness + 1))
        self.producer = RolloutProducer(trainer, self.queue, max_concurrency=self.max_concurrency)
        self.producing: asyncio.Task[None] | None = None
        self._taken: tuple[list[FinishedGroup], list[FinishedGroup]] = ([], [])
        self._update: tuple[int, int, float] = (0, 0, 0.0)  # policy version, groups launched, wall clock at its start

    async def start(self) -> None:
        self.producing = asyncio.create_task(self.producer.run())

    async def take(self, step: int) -> StepData:
        run = self.trainer.run
        started = time.monotonic()
        before = _snapshot(self.producer.counters)
        run.tracker.status(f"async: waiting for {self.batch_size} fresh groups")
        fresh, stale = self._taken = await self._take_batch()
        data = self._step_data(fresh, stale, self.producer.counters, before)
        data.metrics["async/wait_s"] = time.monotonic() - started
        self._update = (run.progress.policy_version, self.producer.counters.launched, time.time())
        return data

    def after_update(self, step: int, data: StepData, metrics: dict[str, float]) -> None:
        version, launched_before, update_start = self._update
        metrics["async/groups_launched_during_update"] = float(self.producer.counters.launched - launched_before)
        self._audit(step, version, *self._taken, [update_start, time.time()])

    async def close(self) -> None:
        if self.producing is not None:
            self.producing.cancel()
            await asyncio.gather(self.producing, return_exceptions=True)

    async def _take_batch(self) -> tuple[list[FinishedGroup], list[FinishedGroup]]:
        """The next ``batch_size`` groups within ``max_staleness`` (the stale ones met on the way
        are returned too, to be counted). Raises what the producer raised, instead of waiting forever."""
        assert self.producing is not None
        queue, producing = self.queue, self.producing
        fresh: list[FinishedGroup] = []
        stale: list[FinishedGroup] = []
        while len(fresh) < self.batch_size:
            getting = asyncio.ensure_future(queue.get())
            await asyncio.wait({getting, producing}, return_when=asyncio.FIRST_COMPLETED)
            if not getting.done():
                getting.cancel()
                producing.result()  # raises the producer's error
                raise RuntimeError("the rollout producer stopped")
            ok, old = split_by_staleness([getting.result()], self.trainer.run.progress.policy_version,
                                          self.max_staleness)
            fresh += ok
            stale += old
        return fresh, stale

    def _step_data(self, fresh: list[FinishedGroup], stale: list[FinishedGroup], counters: ProducerCounters,
                   before: dict[str, int]) -> StepData:
        version = self.trainer.run.progress.policy_version
        sessions = [s for g in fresh for s in g.sessions]
        rewards = {sid: r for g in fresh for sid, r in g.rewards.items()}
        lags = [version - g.behaviour_version for g in fresh]
        now = _snapshot(counters)
        return StepData(sessions, rewards, {
            "rollout/sessions": float(now["sessions"] - before["sessions"]),
            "rollout/failed": float(now["failed"] - before["failed"]),
            "rollout/timed_out": float(now["timed_out"] - before["timed_out"]),
            "rollout/stale": float(sum(len(g.sessions) for g in stale)),
            "rollout/seconds": max((g.report.seconds for g in fresh), default=0.0),
            "async/groups_trained": float(len(fresh)), "async/dropped_stale": float(len(stale)),
            "async/empty_groups": float(now["empty"] - before["empty"]),
            "async/mean_lag": sum(lags) / len(lags) if lags else 0.0, "async/max_lag": float(max(lags, default=0)),
            **outcome_metrics(sessions, rewards, success_key="success/train", reward_key="reward/mean"),
        })

    def _audit(self, step: int, version: int, fresh: list[FinishedGroup], stale: list[FinishedGroup],
               update_window: list[float]) -> None:
        """One line per update: the policy version it started from, the groups trained and dropped."""
        record = {"step": step, "policy_version": version, "update_start": update_window[0],
                  "update_end": update_window[1],
                  "trained": [{"group_id": g.group_id, "lag": version - g.behaviour_version,
                               "sessions": [s.id for s in g.sessions]} for g in fresh],
                  "dropped": [{"group_id": g.group_id, "lag": version - g.behaviour_version} for g in stale]}
        with self.audit_path.open("a") as f:
            f.write(json.dumps(record) + "\n")


def _snapshot(counters: ProducerCounters) -> dict[str, int]:
    return {"sessions": counters.sessions, "failed": counters.failed, "timed_out": counters.timed_out,
            "empty": counters.empty}
