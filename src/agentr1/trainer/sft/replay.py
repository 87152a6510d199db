"""Expert demonstrations replayed through the gateway as ordinary stored sessions.

A demonstration is an :class:`agentr1.envs.AgentEnv` (fresh) and the expert's assistant turns for
its episode (a walkthrough shipped with the environment, a hand-written solution). The replay runs
the environment's own driver, :class:`agentr1.envs.AgentEnvLoop`, with the real openai client
through a real (embedded) gateway whose :class:`~agentr1.gateway.backends.ScriptedBackend` answers
each call with the next expert turn as the policy's tokens (teacher forcing). The environment sees
the message the gateway parsed from those tokens — what the policy would have said — and reports
its rewards on the steps, as in RL rollouts. The session's outcome is the episode's return, so
``min_reward`` selects demonstrations that actually solved the task.

A demonstration whose episode does not end exactly with its last expert turn is a failed
session with the reason as its error (never trained on with the default ``statuses``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEMO_SOURCE", "Demonstration", "ReplayReport", "replay_demonstrations"]

DEMO_SOURCE = "scripted"  # session metadata["demo_source"] of replayed demonstrations


@dataclass
class Demonstration:
    task_id: str
    env: Any  # an agentr1.envs.AgentEnv, not reset yet
    actions: list[dict[str, Any]]  # the expert's assistant messages, in order
    group_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReplayReport:
    run_id: str
    sessions: list[str] = field(default_factory=list)
    finished: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)  # the first few


class DemonstrationMismatch(RuntimeError):
    """The environment's episode and the expert's turns do not end together."""


def replay_demonstrations(demos: Iterable[Demonstration], *, model: str | os.PathLike[str], db: str, run_id: str,
                          max_tokens: int = 2048) -> ReplayReport:
    """Replay ``demos`` through a gateway rendering for ``model`` (its template and tokenizer; no
    weights are loaded); the sessions land in run ``run_id`` of the store at ``db``."""
    # lazy: the replay's gateway, store and renderer load only when replaying (agentr1 sft imports this package)
    from agentr1.core import resolve_model
    from agentr1.core.rendering import load_renderer
    from agentr1.gateway import EmbeddedGateway, GatewaySettings
    from agentr1.gateway.backends import ScriptedBackend
    from agentr1.sdk import configure
    from agentr1.store import TraceStore

    renderer = load_renderer(resolve_model(model))
    # no model runs here: the policy's context limit is checked where rows are built (data.max_length)
    backend = ScriptedBackend(renderer, model_name="policy", max_context=1 << 20)
    report = ReplayReport(run_id)
    store = TraceStore.open(db)
    try:
        with EmbeddedGateway(GatewaySettings(db=db, accept_any_model=True, default_run=run_id), store=store,
                             backend=backend, renderer=renderer) as gateway:
            configure(gateway.url)
            asyncio.run(_replay_all(demos, backend, report, max_tokens))
    finally:
        store.close()
    return report


async def _replay_all(demos: Iterable[Demonstration], backend: Any, report: ReplayReport, max_tokens: int) -> None:
    for demo in demos:  # one at a time: a demonstration is cheap (no sampling), and the order is kept
        await _replay_one(demo, backend, report, max_tokens)


async def _replay_one(demo: Demonstration, backend: Any, report: ReplayReport, max_tokens: int) -> None:
    # lazy, as above
    from agentr1.envs import AgentEnvLoop
    from agentr1.sdk import async_openai_client, session

    metadata = {**demo.metadata, "demo_source": DEMO_SOURCE}
    try:
        async with session(task_id=demo.task_id, group_id=demo.group_id, run_id=report.run_id, metadata=metadata,
                           new=True) as active:
            report.sessions.append(active.id)
            client = None
            try:
                backend.script(active.id, demo.actions, [tool.schema() for tool in demo.env.tools])
                client = async_openai_client(max_retries=0)
                loop = AgentEnvLoop(demo.env, max_steps=max(1, len(demo.actions)), client=client,
                                    max_tokens=max_tokens)
                episode = await loop.run()
            finally:
                backend.forget(active.id)
                if client is not None:
                    await client.close()
            if not episode.done or episode.steps != len(demo.actions):
                raise DemonstrationMismatch(
                    f"the episode {'ended' if episode.done else 'was not done'} after {episode.steps} of "
                    f"{len(demo.actions)} expert turns")
    except Exception as exc:  # the session is marked failed with the error; count it and go on
        report.failed += 1
        if len(report.errors) < 5:
            report.errors.append(f"{demo.task_id}: {type(exc).__name__}: {exc}")
    else:
        report.finished += 1


def main(argv: list[str] | None = None) -> None:
    """``python -m agentr1.trainer.sft.replay module:function [key=value ...] --db DB --run-id RUN``:
    replay the demonstrations ``function(**kwargs)`` returns; prints the report as JSON, exit code 1
    when some failed."""
    import argparse
    import json

    import yaml

    from agentr1.core import load_callable  # lazy, as above

    parser = argparse.ArgumentParser(prog="python -m agentr1.trainer.sft.replay", description=main.__doc__)
    parser.add_argument("demos", help="module:function returning a list of Demonstration")
    parser.add_argument("kwargs", nargs="*", help="key=value arguments of the function (YAML values)")
    parser.add_argument("--db", required=True, help="the trace store (SQLite path or URL)")
    parser.add_argument("--run-id", required=True, help="the store run of the sessions")
    parser.add_argument("--model", default="smollm2", help="the policy whose template renders the turns")
    args = parser.parse_args(argv)
    kwargs = {}
    for item in args.kwargs:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"argument {item!r} must look like key=value")
        kwargs[key] = yaml.safe_load(value)
    demos = load_callable(args.demos)(**kwargs)
    report = replay_demonstrations(demos, model=args.model, db=args.db, run_id=args.run_id)
    print(json.dumps({"run_id": report.run_id, "sessions": len(report.sessions), "finished": report.finished,
                      "failed": report.failed, "errors": report.errors}))
    if report.failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
