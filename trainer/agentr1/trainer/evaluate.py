"""`agentr1 eval`: serve a checkpoint through the gateway and measure held-out success.

With ``split="train"`` and ``n`` samples per task it is also how the policy's own rollouts are
collected into a store run for rejection sampling / best-of-n SFT (``agentr1 sft``)."""

from __future__ import annotations

import time
from typing import Any

from agentr1.sdk import configure
from agentr1.store import TraceStore
from agentr1.trainer.config import JobConfig
from agentr1.trainer.rewards import RewardConfig
from agentr1.trainer.rollout import AgentRunner, collect
from agentr1.trainer.scoring import score_sessions
from agentr1.trainer.tasks import load_callable, load_tasks


async def evaluate_checkpoint(job: JobConfig, checkpoint: str | None, *, split: str = "val", n: int = 1,
                              run_id: str | None = None) -> dict[str, Any]:
    from agentr1.core import resolve_model
    from agentr1.gateway import BackgroundServer, GatewaySettings, create_app
    from agentr1.gateway.backends import LocalBackend

    if job.agent is None:
        raise ValueError("evaluation needs `agent` in the config")
    if split not in ("train", "val") or n < 1:
        raise ValueError(f"split must be 'train' or 'val' and n >= 1, got {split!r}, {n}")
    tasks = load_tasks(job.data, split)
    model = resolve_model(checkpoint or job.actor_rollout_ref.model)
    run_id = run_id or f"{job.run_name}-eval-{int(time.time())}"
    store = TraceStore.open(job.db)
    backend = LocalBackend(model, device=job.trainer.device, model_name="policy")
    server = BackgroundServer(create_app(GatewaySettings(db=job.db, accept_any_model=True, default_run=run_id),
                                         store=store, backend=backend))
    try:
        configure(server.start())
        report = await collect(AgentRunner(job.agent), tasks, n=n, run_id=run_id, step=0,
                               max_concurrency=job.actor_rollout_ref.rollout.max_concurrency)
        fns = {spec: load_callable(spec) for spec in job.reward.functions}
        sessions, rewards = score_sessions(store, report.sessions, {t["id"]: t for t in tasks}, fns,
                                           RewardConfig(outcome_placement=job.reward.outcome_placement))
        outcomes = [rewards[s.id].outcome if s.status == "finished" else 0.0 for s in sessions]
    finally:
        server.stop()
        await backend.close()
        store.close()
    return {"model": str(model), "run_id": run_id, "split": split, "tasks": len(tasks), "samples": len(outcomes),
            "failed": report.failed,
            "success": sum(o > 0 for o in outcomes) / max(1, len(outcomes)),
            "reward": sum(outcomes) / max(1, len(outcomes))}
