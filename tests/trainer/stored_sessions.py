"""A store of varied sessions for the row tests: every shape the row builder has a rule for.

:func:`write_varied_sessions` writes them, deterministically in its seed, into a real :class:`TraceStore`: steps that
continue their parent token for token, context rewrites, drift, branches back to an earlier step, sibling choices,
client retries (``retry_of``), untrainable and empty steps, missing, short and non-finite log-probabilities, step
rewards and environment anchors, sessions that finished, failed or are still running. The rows are built from what
the store reads back.
"""

from __future__ import annotations

import random

from agentr1.store import RewardRecord, StepRecord, TraceStore

SHAPES = ("continue", "continue", "continue", "rewrite", "drift", "branch", "sibling", "retry", "fresh",
          "untrainable")


def write_varied_sessions(store: TraceStore, *, seed: int = 57, sessions: int = 36) -> list[str]:
    """Write ``sessions`` sessions; their ids, in order."""
    rng = random.Random(seed)
    run = store.create_run("rows", run_id="rows-run")
    ids = []
    for s in range(sessions):
        metadata = {"anchors": {"0": f"start {s % 3}"}} if s % 5 == 0 else {}
        sid = store.create_session(run_id=run, task_id=f"task-{s % 6}", group_id=None if s % 7 == 3 else f"g{s % 6}",
                                   metadata=metadata, session_id=f"s{s:02d}")
        steps = _session_steps(rng, sid, rng.randint(1, 7))
        store.append_steps(steps)
        rewards = [RewardRecord(sid, round(rng.uniform(-1, 1), 3), name="process", step_index=st.index,
                                source="environment") for st in steps if rng.random() < 0.3]
        rewards += [RewardRecord(sid, 0.0, name=f"anchor:state {rng.randint(0, 2)}", step_index=st.index,
                                 source="environment") for st in steps if rng.random() < 0.25]
        store.add_rewards(rewards)
        status = rng.choice(("finished", "finished", "finished", "failed", "running"))
        if status != "running":
            store.finish_session(sid, status=status, reward=round(rng.uniform(0, 1), 3))
        ids.append(sid)
    return ids


def _session_steps(rng: random.Random, sid: str, n: int) -> list[StepRecord]:
    steps: list[StepRecord] = []
    full: dict[int, list[int]] = {}  # each trainable step's observation + action
    for i in range(n):
        shape = "fresh" if i == 0 else rng.choice(SHAPES)
        last = steps[-1] if steps else None
        obs, parent, drift, retry_of = _ids(rng, 4 + rng.randint(0, 4)), None, False, None
        if shape in ("continue", "drift") and last is not None and last.index in full:
            obs, parent, drift = [*full[last.index], *_ids(rng, rng.randint(0, 3))], last.index, shape == "drift"
        elif shape == "rewrite" and last is not None:
            obs, parent = [*_ids(rng, 3), *obs], last.index
        elif shape == "branch" and len(full) > 1:
            parent = rng.choice(sorted(full)[:-1])
            obs = [*full[parent], *_ids(rng, rng.randint(1, 3))]
        elif shape in ("sibling", "retry") and last is not None and last.trainable:
            obs, parent = list(last.observation_ids), last.parent_index
            retry_of = [last.index] if shape == "retry" else None
        if shape == "untrainable":
            steps.append(StepRecord(sid, i, [], [], None, trainable=False, backend="litellm", model="teacher",
                                    parent_index=i - 1))
            continue
        action = _ids(rng, rng.choice((0, 1, 2, 3, 3, 4, 5, 6)))
        logprobs: list[float] | None = [round(-rng.random() * 3, 4) for _ in action]
        odd = rng.random()
        if odd < 0.08:
            logprobs = None
        elif odd < 0.12 and action:
            logprobs = logprobs[:-1]
        elif odd < 0.15 and action:
            logprobs[0] = float("nan")
        steps.append(StepRecord(sid, i, obs, action, logprobs, parent_index=parent, drift=drift, retry_of=retry_of,
                                policy_version=i // 2, backend="local", model="policy",
                                finish_reason="length" if rng.random() < 0.1 else "stop"))
        full[i] = [*obs, *action]
    return steps


def _ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randint(5, 999) for _ in range(n)]
