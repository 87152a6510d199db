"""Per-step reward assembly: r_t for every step of a trajectory, from every source.

Sources, summed per step:
- the session's outcome reward (``SessionRecord.reward``), placed on the last trainable step
  (``outcome_placement="last"``) or spread evenly over the trainable steps (``"spread"``);
- the per-step rewards stored with the steps (``StepRecord.reward``: process rewards from the SDK
  or the environment);
- reward functions ``fn(session, task) -> float | dict[step_index, float]`` named in the config.
  A float is an outcome (placed like the session outcome), a dict gives rewards per step.

The result is per-step reward values (:class:`SessionRewards`) that the batch builder places on
each step's last action token. A function that returns None, NaN, inf or something that is not a
number fails with :class:`RewardError` naming the function, the session and the step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agentr1.core import Registry
from agentr1.store import SessionRecord, StepRecord

__all__ = [
    "REWARD_FNS",
    "RewardConfig",
    "RewardError",
    "RewardFn",
    "SessionRewards",
    "assemble_rewards",
    "assemble_session_rewards",
    "get_reward_fn",
    "is_trainable_step",
    "list_reward_fns",
    "register_reward_fn",
]

RewardValue = float | int | Mapping[int, float]
RewardFn = Callable[[SessionRecord, Any], RewardValue]
TaskLookup = Mapping[str, Any] | Callable[[SessionRecord], Any]

REWARD_FNS: Registry[RewardFn] = Registry("reward function")


class RewardError(ValueError):
    """A reward is missing or not a finite number."""


def register_reward_fn(name: str) -> Callable[[RewardFn], RewardFn]:
    """Register ``fn(session, task) -> float | dict[step_index, float]`` under ``name``."""
    return REWARD_FNS.register(name)


def list_reward_fns() -> list[str]:
    return REWARD_FNS.names()


def get_reward_fn(name: str) -> RewardFn:
    """The function registered as ``name``; an unknown name raises ``UnknownName`` (a KeyError)."""
    return REWARD_FNS.get(name)


@dataclass(slots=True)
class RewardConfig:
    outcome_placement: Literal["last", "spread"] = "last"
    outcome_weight: float = 1.0  # weight of SessionRecord.reward
    use_step_rewards: bool = True  # add StepRecord.reward (process rewards)
    step_reward_weight: float = 1.0
    functions: dict[str, float] = field(default_factory=dict)  # reward function name -> weight

    def __post_init__(self) -> None:
        if self.outcome_placement not in ("last", "spread"):
            raise ValueError(f"outcome_placement must be 'last' or 'spread', got {self.outcome_placement!r}")


@dataclass(slots=True)
class SessionRewards:
    session_id: str
    steps: dict[int, float]  # step index -> r_t, all sources summed (every step of the session has an entry)
    outcome: float  # the trajectory-level scalar: weighted session outcome + float-valued functions
    components: dict[str, dict[int, float]] = field(default_factory=dict)  # source -> step index -> value
    has_outcome: bool = True  # False when the session had no outcome reward and no function gave one
    failures: dict[str, str] = field(default_factory=dict)  # source -> why it could not score (never a silent 0)

    @property
    def total(self) -> float:
        return sum(self.steps.values())


def is_trainable_step(step: StepRecord) -> bool:
    """Steps the batch builder can train on: sampled by the policy, with at least one action token."""
    return bool(step.trainable and step.action_ids)


def _finite(value: Any, what: str) -> float:
    if value is None:
        raise RewardError(f"{what} is None")
    if isinstance(value, (bool, str, bytes)):
        raise RewardError(f"{what} is not a number: {value!r}")
    if not isinstance(value, (int, float)):
        try:
            value = float(value)  # numpy / torch scalars
        except (TypeError, ValueError):
            raise RewardError(f"{what} is not a number: {value!r}") from None
    value = float(value)
    if not math.isfinite(value):
        raise RewardError(f"{what} is {value}")
    return value


def _outcome_targets(session: SessionRecord, placement: str) -> list[tuple[int, float]]:
    """(step index, share of the outcome) for each step that receives part of an outcome reward."""
    steps = sorted(session.steps, key=lambda s: s.index)
    eligible = [s.index for s in steps if is_trainable_step(s)] or [s.index for s in steps[-1:]]
    if not eligible:
        return []
    if placement == "last":
        return [(eligible[-1], 1.0)]
    return [(i, 1.0 / len(eligible)) for i in eligible]


def assemble_session_rewards(
    session: SessionRecord,
    task: Any = None,
    config: RewardConfig | None = None,
    *,
    functions: Mapping[str, RewardFn] | None = None,
) -> SessionRewards:
    """r_t for every step of one session (see the module docstring for the sources)."""
    cfg = config or RewardConfig()
    indices = {s.index for s in session.steps}
    targets = _outcome_targets(session, cfg.outcome_placement)
    components: dict[str, dict[int, float]] = {}
    outcome = 0.0
    has_outcome = session.reward is not None

    def place_outcome(source: str, value: float) -> None:
        components[source] = {i: value * share for i, share in targets}

    if session.reward is not None and cfg.outcome_weight:
        value = cfg.outcome_weight * _finite(session.reward, f"outcome reward of session {session.id}")
        outcome += value
        place_outcome("outcome", value)

    if cfg.use_step_rewards and cfg.step_reward_weight:
        process = {
            s.index: cfg.step_reward_weight * _finite(s.reward, f"reward of step {s.index} of session {session.id}")
            for s in session.steps
            if s.reward is not None
        }
        if process:
            components["step"] = process

    for name, weight in cfg.functions.items():
        fn = (functions or {}).get(name) or get_reward_fn(name)
        what = f"reward function {name!r} on session {session.id}"
        try:
            result = fn(session, task)
        except RewardError:
            raise
        except Exception as exc:
            raise RewardError(f"{what} raised {type(exc).__name__}: {exc}") from exc
        if isinstance(result, Mapping):
            per_step: dict[int, float] = {}
            for key, value in result.items():
                if isinstance(key, bool) or not isinstance(key, int) or key not in indices:
                    raise RewardError(f"{what} returned a reward for step {key!r}, which the session does not have "
                                      f"(steps: {sorted(indices)})")
                per_step[key] = weight * _finite(value, f"{what}, step {key},")
            components[f"fn:{name}"] = per_step
        else:
            value = weight * _finite(result, what)
            outcome += value
            has_outcome = True
            place_outcome(f"fn:{name}", value)

    steps = dict.fromkeys(sorted(indices), 0.0)
    for values in components.values():
        for index, value in values.items():
            steps[index] += value
    return SessionRewards(session.id, steps, outcome, components, has_outcome)


def _task_for(session: SessionRecord, tasks: TaskLookup | None) -> Any:
    if tasks is None:
        return None
    if callable(tasks):
        return tasks(session)
    return tasks.get(session.task_id) if session.task_id is not None else None


def assemble_rewards(
    sessions: Iterable[SessionRecord],
    config: RewardConfig | None = None,
    *,
    tasks: TaskLookup | None = None,
    functions: Mapping[str, RewardFn] | None = None,
) -> dict[str, SessionRewards]:
    """Per-step rewards of many sessions, keyed by session id (what ``build_rows(rewards=...)`` takes).

    ``tasks`` maps a task id to the task object given to reward functions (or is a callable of the
    session); ``functions`` supplies reward functions by name without registering them.
    """
    return {
        s.id: assemble_session_rewards(s, _task_for(s, tasks), config, functions=functions) for s in sessions
    }
