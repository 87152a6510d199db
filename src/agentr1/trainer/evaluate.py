"""Evaluation: a set of tasks run, scored (the reward stage, ``agentr1.trainer.scoring``) and summarised under
the evaluation protocol, for the training loop's held-out metrics and ``agentr1 eval``.

`agentr1 eval` (:func:`evaluate_checkpoint`) serves a checkpoint through an embedded gateway and
evaluates it under the protocol of ``agentr1.trainer.eval_metrics`` (:func:`run_protocol`: greedy pass@1, and
mean@K / pass@K / maj@K of K samples a task; the trainer's validation runs the same) on the job's test split (the
split for claims; ``split="val"``: the one settings are chosen on), with its progress on stderr. With
``split="train"`` and ``n`` samples per task it is also how the policy's own rollouts are collected into a store
run for rejection sampling / best-of-n SFT (``agentr1 sft``)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

from agentr1.core import resolve_model
from agentr1.gateway import EmbeddedGateway, GatewaySettings, LaunchSettings
from agentr1.sdk import configure
from agentr1.store import SessionRecord, TraceStore
from agentr1.trainer.agent_session import use_session_threads
from agentr1.trainer.config import JobConfig, ValidationSampling
from agentr1.trainer.cpu_dtypes import runs_on_cpu
from agentr1.trainer.eval_metrics import TaskResult, final_answer, protocol_metrics
from agentr1.trainer.eval_progress import EvalProgress, ScoredAsTheyEnd
from agentr1.trainer.rollout import AgentRunner, collect
from agentr1.trainer.scoring import Scored, Scorer, answerable, outcome_metrics
from agentr1.trainer.tasks import SPLITS, load_tasks

__all__ = ["ProtocolRun", "evaluate_checkpoint", "reproducible_settings", "run_and_score", "run_protocol",
           "task_results"]


async def run_and_score(runner: AgentRunner, tasks: list[dict[str, Any]], scorer: Scorer, *, n: int, run_id: str,
                        step: int, max_concurrency: int, switch_interval_s: float | None = None,
                        sampling: dict[str, Any] | None = None, group_prefix: str | None = None,
                        progress: EvalProgress | None = None) -> Scored:
    """``n`` samples of the agent per task (a group per task), then the reward stage over them. ``sampling``: the
    sessions' sampling override (an evaluation's decoding; :meth:`AgentRunner.run`). ``progress``: shown as episodes
    end, each scored as soon as it ends (:class:`ScoredAsTheyEnd`)."""
    by_id = {t["id"]: t for t in tasks}
    live = None if progress is None else ScoredAsTheyEnd(scorer, by_id, progress)
    try:
        report = await collect(runner, tasks, n=n, run_id=run_id, step=step, max_concurrency=max_concurrency,
                               switch_interval_s=switch_interval_s, sampling=sampling, group_prefix=group_prefix,
                               on_done=None if live is None else live.ended)
    except BaseException:
        if live is not None:
            live.cancel()
        raise
    if live is None:
        sessions, rewards = await asyncio.to_thread(scorer.score, report.sessions, by_id)
    else:
        sessions, rewards = await live.finish(report.sessions)
    return Scored(report, sessions, rewards)


@dataclass
class ProtocolRun:
    """One policy evaluated under the protocol: every task's outcomes, the metrics, the rollouts."""

    results: list[TaskResult]
    metrics: dict[str, float]
    greedy: Scored | None
    sampled: Scored | None


async def run_protocol(runner: AgentRunner, tasks: list[dict[str, Any]], scorer: Scorer, protocol: ValidationSampling,
                       *, run_id: str, step: int, max_concurrency: int, source: str,
                       switch_interval_s: float | None = None, progress: EvalProgress | None = None) -> ProtocolRun:
    """The evaluation protocol (``agentr1.trainer.eval_metrics``) on ``tasks``: a greedy pass (temperature 0 on every
    call, one run a task) and ``protocol.n`` runs a task at ``protocol.temperature`` (None: as the agent asks), each
    sample with its own seeds; success is a positive outcome. ``source``: the data source name for tasks without a
    ``data_source`` of their own. ``progress``: both passes' episodes, shown as they end."""
    common = dict(run_id=run_id, step=step, max_concurrency=max_concurrency, switch_interval_s=switch_interval_s,
                  progress=progress)
    greedy = sampled = None
    if protocol.greedy:
        if progress is not None:
            progress.begin("greedy")
        greedy = await run_and_score(runner, tasks, scorer, n=1, sampling={"temperature": 0.0},
                                     group_prefix=f"{run_id}/step{step}/greedy", **common)  # type: ignore[arg-type]
    if protocol.n:
        if progress is not None:
            progress.begin(f"sampled (K={protocol.n})")
        override = {} if protocol.temperature is None else {"temperature": protocol.temperature}
        sampled = await run_and_score(runner, tasks, scorer, n=protocol.n, sampling=override,
                                      group_prefix=f"{run_id}/step{step}/sampled", **common)  # type: ignore[arg-type]
    results = task_results(tasks, greedy, sampled, source=source)
    return ProtocolRun(results, protocol_metrics(results), greedy, sampled)


def task_results(tasks: list[dict[str, Any]], greedy: Scored | None, sampled: Scored | None, *, source: str
                 ) -> list[TaskResult]:
    """Each task's greedy success and sampled successes / final answers, in sample order. A session that failed
    for an infrastructure reason (``outcome_metrics``) counts as no run; any other unfinished one as a failure."""
    by_id = {str(t["id"]): TaskResult(str(t["id"]), str(t.get("data_source") or source)) for t in tasks}
    numeric = {str(t["id"]): isinstance(t.get("answer"), int | float) and not isinstance(t.get("answer"), bool)
               for t in tasks}
    with_answers = all("answer" in t for t in tasks)
    for scored, is_greedy in ((greedy, True), (sampled, False)):
        if scored is None:
            continue
        ordered = sorted(scored.sessions, key=lambda s: int((s.metadata or {}).get("sample", 0)))
        for session in ordered:
            result = by_id.get(str(session.task_id))
            if result is None or not answerable(session):
                continue
            ok = session.status == "finished" and scored.rewards[session.id].outcome > 0
            if is_greedy:
                result.greedy = ok
                continue
            result.samples.append(ok)
            if with_answers:
                result.answers.append(final_answer(_final_reply(session), numeric=numeric[result.task_id]))
    return list(by_id.values())


def _final_reply(session: SessionRecord) -> str | None:
    if session.status != "finished" or not session.steps:
        return None
    content = session.steps[-1].action.get("content")
    return content if isinstance(content, str) else None


def _serve_checkpoint(job: JobConfig, checkpoint: str | None, run_id: str, *, reproducible: bool
                      ) -> tuple[Any, GatewaySettings]:
    """The checkpoint on the embedded engine, with the job's engine options (``rollout.engine``): an
    evaluation is served as the job's rollouts are, whichever backend the job trains with; ``reproducible``: on the
    CPU with the engine's exact prefill whatever the job says (:func:`reproducible_settings`)."""
    from agentr1.trainer.serving import gateway_settings

    model = resolve_model(checkpoint or job.actor_rollout_ref.model)
    settings = gateway_settings(job, model=model, run_id=run_id).model_copy(update={
        "backend": "local", "backend_urls": [], "launch": LaunchSettings(), "served_model_name": "policy"})
    return model, reproducible_settings(settings) if reproducible else settings


def reproducible_settings(settings: GatewaySettings) -> GatewaySettings:
    """``settings`` for an evaluation whose greedy pass gives the same episodes every time on this machine. On the CPU
    the embedded engine runs batch-invariant (``engine.batch_invariant``: a call's bits do not depend on which other
    calls share its decode steps) and prefills in exact mode (``engine.exact``: a prompt's keys and values are the
    same bits whether it was prefilled whole, in pieces or reused from another session's cached prefix; otherwise
    which prefixes are cached, and so a call's bits, depends on the order the episodes' calls came in). The thread
    count changes no bits (``agentr1.engine.sampling.logsumexp_rows``). On a GPU the job's settings stay: cuBLAS sums
    in orders that change with the batch, and no setting makes its results independent of the rows beside them."""
    if runs_on_cpu(settings.engine.device):
        engine = settings.engine.model_copy(update={"exact": True, "batch_invariant": True})
        return settings.model_copy(update={"engine": engine})
    return settings


def _served_on(gateway: EmbeddedGateway, settings: GatewaySettings) -> tuple[str, str]:
    """The dtype and the device the embedded engine serves on, ``auto`` resolved (float32 on the CPU, bfloat16 on a
    GPU; a GPU where there is one)."""
    engine = gateway.abilities.engine_stats
    return (settings.engine.dtype, settings.engine.device) if engine is None else engine.served_on


async def evaluate_checkpoint(job: JobConfig, checkpoint: str | None, *, split: str = "test",
                              protocol: ValidationSampling | None = None, run_id: str | None = None,
                              progress_title: str | None = None, reproducible: bool = True) -> dict[str, Any]:
    """Serve ``checkpoint`` (default: the job's model) through an embedded gateway and evaluate it on the
    ``split``'s tasks (``test``: the split for claims; ``val``: the one settings are chosen on; ``train``)
    under ``protocol`` (default: a greedy pass and one sample a task as the agent asks).
    The answer: the model, the store run, the split, the engine's dtype, counts and the protocol's metrics
    (``val-core/<source>/acc/...``, verl's name for held-out metrics, whatever the split), plus ``success``/``reward``
    of the sampled runs (``success_greedy`` of the greedy pass) and, under ``tasks_detail``, each task's outcomes
    (for paired comparisons). ``progress_title``: show the progress on stderr under this title (None: silent).
    ``reproducible``: on the CPU the greedy pass gives the same episodes every time (:func:`reproducible_settings`);
    False: the job's own engine settings (its rollouts' and validation's)."""
    if job.agent is None:
        raise ValueError("evaluation needs `agent` in the config")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    protocol = protocol or ValidationSampling()
    tasks = load_tasks(job.data, split)
    run_id = run_id or f"{job.run_name}-eval-{int(time.time())}"
    model, settings = _serve_checkpoint(job, checkpoint, run_id, reproducible=reproducible)
    episodes = len(tasks) * (int(protocol.greedy) + protocol.n)
    progress = None if progress_title is None else EvalProgress(episodes, title=progress_title)
    store = TraceStore.open(job.db)
    rollout = job.actor_rollout_ref.rollout
    use_session_threads(rollout.max_concurrency)
    try:
        with EmbeddedGateway(settings, store=store) as gateway:
            dtype, device = _served_on(gateway, settings)
            configure(gateway.url)
            runner = AgentRunner(job.agent)
            try:
                run = await run_protocol(runner, tasks, Scorer.for_job(job, store, run_id), protocol, run_id=run_id,
                                         step=0, max_concurrency=rollout.max_concurrency, source=job.run_name,
                                         switch_interval_s=rollout.switch_interval_s, progress=progress)
            finally:
                runner.close()
    finally:
        store.close()
        if progress is not None:
            progress.close()
    answer: dict[str, Any] = {"model": str(model), "run_id": run_id, "split": split, "tasks": len(tasks),
                              "dtype": dtype, "device": device,
                              "reproducible": reproducible and runs_on_cpu(device),
                              "protocol": protocol.model_dump()}
    if run.sampled is not None:
        answer.update(samples=len(run.sampled.sessions), failed=run.sampled.report.failed,
                      **outcome_metrics(run.sampled.sessions, run.sampled.rewards, success_key="success",
                                        reward_key="reward"))
    if run.greedy is not None:
        answer.update(greedy_failed=run.greedy.report.failed,
                      **outcome_metrics(run.greedy.sessions, run.greedy.rewards, success_key="success_greedy",
                                        reward_key="reward_greedy"))
    answer.update(run.metrics)
    answer["tasks_detail"] = [asdict(r) for r in run.results]
    return answer
