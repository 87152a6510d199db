"""Task groups after a rollout: failed members never become zero rewards, incomplete groups are
completed or dropped, and what the agent sampled with is checked against the job.

A session is *usable* when it finished and every reward source scored it (a judge that could not
parse its own answer, or ran out of budget, leaves a reward failure, see ``agentr1.trainer.judge``).
Every other member of a group is a failure, counted by kind (``failures/<kind>``: the kind the SDK
recorded in the session's error, ``agentr1.sdk.failures``: timeout, backend, environment,
cancelled, agent; ``judge`` for reward failures). A failed session is never trained: not as a
zero reward, not at all.
A run whose session was never opened (``POST /sessions`` failed, ``RolloutReport.unopened``) is a
failed member of its group too, counted by its kind; a group none of whose sessions opened is
still a group (dropped, or resampled).

A group with a failed member would give GRPO-style baselines fewer samples than the others, and a
biased set of them (the ones that did not hit the broken tool). ``algorithm.incomplete_groups``:

- ``drop``: the whole group leaves the batch (``groups/dropped``);
- ``resample``: the missing samples are run again, in the same group, up to
  ``algorithm.resample_attempts`` rounds; a group still incomplete after that is dropped.

Sampling (``actor_rollout_ref.rollout.sampling_check``): the update recomputes log-probs at
``rollout.temperature``; a step the agent sampled at another temperature or ``top_p`` (the gateway
records the request's sampling parameters with every step) would be trained with wrong ratios, so
by default it is an error (:class:`SamplingMismatch`) naming the step and both values.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agentr1.sdk import FAILURE_KINDS, INFRASTRUCTURE_KINDS, failure_kind_of_error
from agentr1.store import SessionRecord
from agentr1.trainer.config import JobConfig
from agentr1.trainer.rewards import SessionRewards
from agentr1.trainer.rollout import AgentRunner, RolloutReport, UnopenedSession
from agentr1.trainer.scoring import Scored, Scorer

__all__ = ["GroupCompleter", "Resample", "SamplingMismatch", "check_sampling", "failure_of", "resampler"]

# What the completer needs to run missing samples again: (task, group id, the samples' numbers, training
# step) -> those runs, scored. The trainer's is :func:`resampler`.
Resample = Callable[[dict[str, Any], str, Sequence[int], int], Awaitable[Scored]]

log = logging.getLogger("agentr1.trainer.groups")

_KINDS = (*FAILURE_KINDS, "judge", "unknown")


class SamplingMismatch(ValueError):
    """A step was sampled with other sampling parameters than the job's ``rollout`` settings."""


def failure_of(session: SessionRecord, rewards: SessionRewards | None) -> str | None:
    """Why ``session`` cannot be trained on (a failure kind), or None when it can."""
    if session.status != "finished":
        return failure_kind_of_error(session.error) or ("timeout" if "timed out" in (session.error or "")
                                                         else "unknown")
    if rewards is not None and rewards.failures:
        return "judge"
    return None


def check_sampling(session: SessionRecord, temperature: float, top_p: float) -> str | None:
    """Why the session's trainable steps do not match the job's sampling settings, or None."""
    for step in session.steps:
        if not step.trainable or not step.sampling:
            continue
        for key, want in (("temperature", temperature), ("top_p", top_p)):
            got = step.sampling.get(key)
            if got is not None and abs(float(got) - want) > 1e-6:
                return (f"step {step.index} of session {session.id} was sampled with {key}={got}, but "
                        f"actor_rollout_ref.rollout.{key} is {want}: the update would compute log-probs of "
                        f"another distribution. Make the agent send {key}={want} (or set rollout.{key} to "
                        f"what the agent uses), or set actor_rollout_ref.rollout.sampling_check to warn/off")
    return None


def resampler(runner: AgentRunner, scorer: Scorer, *, run_id: str) -> Resample:
    """The trainer's :data:`Resample`: the samples run at once by ``runner`` in run ``run_id``, then scored."""

    async def resample(task: dict[str, Any], group_id: str, samples: Sequence[int], step: int) -> Scored:
        report = RolloutReport()
        await asyncio.gather(*(runner.run(task, run_id=run_id, group_id=group_id, sample=k, step=step, report=report)
                               for k in samples))
        sessions, rewards = await asyncio.to_thread(scorer.score, report.sessions, {task["id"]: task})
        return Scored(report, sessions, rewards)

    return resample


class GroupCompleter:
    """Applies ``algorithm.incomplete_groups`` to the scored sessions of a rollout; counts as it goes.
    ``resample``: how missing samples are run again (None: they cannot be, the groups are dropped)."""

    def __init__(self, config: JobConfig, resample: Resample | None = None) -> None:
        self.policy = config.algorithm.incomplete_groups
        self.attempts = config.algorithm.resample_attempts
        self.resample = resample
        rollout = config.actor_rollout_ref.rollout
        self.temperature, self.top_p, self.sampling_check = rollout.temperature, rollout.top_p, rollout.sampling_check
        self.counts: Counter[str] = Counter()

    def take_metrics(self) -> dict[str, float]:
        """The counts since the last call (then reset): groups kept/dropped/resampled, failures by kind."""
        counts, self.counts = self.counts, Counter()
        metrics = {f"failures/{k}": float(counts[f"failures/{k}"]) for k in _KINDS}
        metrics["failures/infrastructure"] = float(sum(counts[f"failures/{k}"] for k in INFRASTRUCTURE_KINDS))
        for key in ("groups/complete", "groups/incomplete", "groups/dropped", "groups/resampled",
                    "groups/completed_by_resampling", "groups/resampled_sessions", "sampling/mismatched_sessions"):
            metrics[key] = float(counts[key])
        return metrics

    async def complete(self, tasks: dict[str, dict[str, Any]], sessions: list[SessionRecord],
                       rewards: dict[str, SessionRewards], *, step: int,
                       unopened: Sequence[UnopenedSession] = ()
                       ) -> tuple[list[SessionRecord], dict[str, SessionRewards]]:
        """The usable sessions of the complete groups (resampled where configured), and their rewards.

        ``unopened``: the runs of this rollout whose session was never created: missing members."""
        groups: dict[str, list[SessionRecord]] = defaultdict(list)
        for s in sessions:
            groups[s.group_id or s.id].append(s)
        lost: dict[str, list[UnopenedSession]] = defaultdict(list)
        for u in unopened:
            lost[u.group_id].append(u)
            groups.setdefault(u.group_id, [])
        kept: list[SessionRecord] = []
        for group_id, members in groups.items():
            usable = self._usable(members, rewards) + self._count_unopened(lost[group_id])
            size = len(members) + len(lost[group_id])
            missing = size - len(usable)
            if missing and self.policy == "resample":
                self.counts["groups/resampled"] += 1
                task_id = members[0].task_id if members else lost[group_id][0].task_id
                sample = max([int(m.metadata.get("sample", 0)) for m in members] + [u.sample for u in lost[group_id]])
                usable += await self._resample(tasks, task_id, sample, group_id, missing, rewards, step=step)
            self.counts["groups/incomplete" if missing else "groups/complete"] += 1
            if len(usable) == size:
                self.counts["groups/completed_by_resampling"] += bool(missing)
                kept += usable
            else:
                self.counts["groups/dropped"] += 1
                log.info("dropped group %s: %d of %d samples usable", group_id, len(usable), size)
        return kept, {s.id: rewards[s.id] for s in kept}

    def _usable(self, members: list[SessionRecord], rewards: dict[str, SessionRewards]) -> list[SessionRecord]:
        usable = []
        for s in members:
            kind = failure_of(s, rewards.get(s.id))
            if kind is not None:
                self.counts[f"failures/{kind}"] += 1
                continue
            self._check(s)
            usable.append(s)
        return usable

    def _check(self, session: SessionRecord) -> None:
        if self.sampling_check == "off":
            return
        problem = check_sampling(session, self.temperature, self.top_p)
        if problem is None:
            return
        self.counts["sampling/mismatched_sessions"] += 1
        if self.sampling_check == "error":
            raise SamplingMismatch(problem)
        log.warning("%s", problem)

    def _count_unopened(self, unopened: list[UnopenedSession]) -> list[SessionRecord]:
        """Counts the runs whose session never opened, by failure kind; none of them is usable."""
        for u in unopened:
            self.counts[f"failures/{u.kind}"] += 1
        return []

    async def _resample(self, tasks: dict[str, dict[str, Any]], task_id: str | None, sample: int,
                        group_id: str, missing: int, rewards: dict[str, SessionRewards], *, step: int
                        ) -> list[SessionRecord]:
        """Up to ``attempts`` rounds of new samples for the ``missing`` ones; the usable ones found."""
        task = tasks.get(task_id or "")
        if task is None or self.resample is None:
            return []
        found: list[SessionRecord] = []
        sample = sample + 1000  # resamples are told apart in the metadata
        for _ in range(self.attempts):
            need = missing - len(found)
            if need <= 0:
                break
            scored = await self.resample(task, group_id, range(sample, sample + need), step)
            sample += need
            self.counts["groups/resampled_sessions"] += len(scored.report.sessions) + len(scored.report.unopened)
            rewards.update(scored.rewards)
            found += self._usable(scored.sessions, rewards) + self._count_unopened(scored.report.unopened)
        return found[:missing]
