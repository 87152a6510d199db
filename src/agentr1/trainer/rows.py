"""The unit the trainer trains on: one token sequence built from stored steps, exact ids only.

A row is either one step (the Agent-R1 layout: prompt = the step's observation ids, response =
its action ids) or several steps of one trajectory merged into one sequence when each later step
extends the earlier ones token for token (prompt = the first observation, response = action 1 +
feedback 1 + action 2 + ...). ``response_mask`` is 1 exactly on sampled tokens. Everything
response-aligned has ``len(response_ids)`` entries. Which steps share a row, and their tokens, come from the store's
one row layout (:func:`agentr1.store.lay_out_rows`, whose :class:`~agentr1.store.Segment` a row's segments are).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentr1.store import Segment

__all__ = ["Segment", "TrainRow"]


@dataclass(slots=True)
class TrainRow:
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]  # 1 on sampled (action) tokens, 0 on prompt/feedback tokens
    old_logprobs: list[float]  # rollout logprobs on action tokens, 0.0 elsewhere
    token_rewards: list[float]  # each step's reward on its last action token, 0.0 elsewhere
    segments: list[Segment]
    session_id: str  # the trajectory
    group_id: str  # the task group (n samples of one task)
    task_id: str | None = None
    policy_version: int = 0
    outcome_reward: float = 0.0
    advantages: list[float] = field(default_factory=list)  # filled by the advantage stage
    returns: list[float] = field(default_factory=list)  # filled by estimators with a critic
    anchor_keys: list[str] = field(default_factory=list)  # per segment: hash of the step's observation (GiGPO)
    values: list[float] = field(default_factory=list)  # critic values, response-aligned (gae, steppo); set by caller
    has_old_logprobs: bool = True  # False when a step of the row came without rollout logprobs (zeros stand in)
    images: tuple[str, ...] = ()  # sha256 of the row's images in sequence order (vision-language models)

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)
