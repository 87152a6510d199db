"""What a session remembers of its calls (:class:`CallHistory`): the next step index, the steps a new call may
continue or branch from, and the last call's parent, drift and steps.

A call changes it only inside :meth:`~agentr1.gateway.sessions.SessionRegistry.recording`, one transaction per call:
a call whose steps are not stored leaves the history as it found it. Every field of :class:`CallHistory` belongs to
that transaction by construction (:meth:`CallHistory.snapshot` and :meth:`CallHistory.restore` go over
``dataclasses.fields``): a field added here is rolled back with the others.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field

from agentr1.core.rendering import PreviousTurn
from agentr1.store import StepRecord

__all__ = ["MAX_RECENT_STEPS", "CallHistory", "previous_from_step"]

MAX_RECENT_STEPS = 8  # the steps of a session a new call may branch from (besides the last call's choices)
Turn = tuple[int, PreviousTurn]  # a step's index and what a call continuing it needs


@dataclass
class CallHistory:
    next_index: int = 0
    previous: list[Turn] = field(default_factory=list)  # the choices of the last call
    previous_parent: int | None = None  # the parent of those choices: a client retry continues from it too
    previous_drift: bool = False  # whether the last call drifted: its retry has the same prompt, so drifts too
    last_call: list[int] = field(default_factory=list)  # the last call's own step indices (a retry replaces these)
    recent: list[Turn] = field(default_factory=list)  # the last steps: where a branch may fork

    @classmethod
    def after(cls, last: StepRecord | None) -> CallHistory:
        """The history of a session read back from the store, whose newest step is ``last`` (None: no step)."""
        if last is None:
            return cls()
        turn = (last.index, previous_from_step(last))
        return cls(next_index=last.index + 1, previous=[turn], previous_parent=last.parent_index,
                   previous_drift=last.drift, last_call=[last.index], recent=[turn])

    def snapshot(self) -> CallHistory:
        """A copy of every field (containers copied, so a change in place does not reach the copy)."""
        return CallHistory(**{f.name: copy.copy(getattr(self, f.name)) for f in dataclasses.fields(self)})

    def restore(self, saved: CallHistory) -> None:
        """Every field back to ``saved``'s."""
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(saved, f.name))

    def allocate(self, n: int) -> list[int]:
        """The indices of a call's ``n`` new steps."""
        indices = list(range(self.next_index, self.next_index + n))
        self.next_index += n
        return indices

    def repeats_last_call(self, parent: int | None, prompt_ids: list[int]) -> bool:
        """Whether a call shows the model the same observation as the last call, from the same parent: by content,
        so it holds for any client, and also when the first attempt was still being generated when the retry
        arrived (both then continued the same parent)."""
        return bool(self.previous) and parent == self.previous_parent and prompt_ids == self.previous[-1][1].prompt_ids

    def remember(self, turns: list[Turn], *, parent: int | None, drift: bool, repeated: bool,
                 replaces: list[int] | None) -> None:
        """What the next call may continue: ``turns``, the new call's choices. A call that ``repeated`` the last one
        joins its choices (a deliberate resample), less those it ``replaces`` (a client retry); any other call
        replaces them."""
        kept = [t for t in self.previous if t[0] not in (replaces or ())] if repeated else []
        self.previous = [*kept, *turns]
        self.recent = [*self.recent, *turns][-MAX_RECENT_STEPS:]
        self.previous_parent, self.previous_drift = parent, drift
        self.last_call = [index for index, _ in turns]

    def forget_turns(self) -> None:
        """Nothing to continue token for token (a call of an external model: text only)."""
        self.previous = []


def previous_from_step(step: StepRecord) -> PreviousTurn:
    """What a call continuing the stored ``step`` needs of it."""
    return PreviousTurn(
        messages=step.messages_seen,
        tools=step.tools,
        prompt_ids=step.observation_ids,
        action_ids=step.action_ids,
        assistant_message=step.action.get("message") or {"role": "assistant", "content": step.action.get("content")},
        prefill=step.action.get("prefill") or "",
    )
