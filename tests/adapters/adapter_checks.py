"""What every adapter test checks in the store: the calls landed in the session, token-exact."""

from __future__ import annotations

import importlib.util
import itertools
import json
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "agents"


def exact_steps(store: Any, session_id: str, n_steps: int, *, tool_calls: int | None = None) -> list[Any]:
    """The session has ``n_steps`` steps, each continuing the previous one token for token (step k+1's
    observation starts with step k's observation + action + feedback ids), none drifted.
    ``tool_calls``: how many leading steps are calculator calls (default: all but the last)."""
    steps = store.get_session(session_id).steps
    assert [s.index for s in steps] == list(range(n_steps)), [s.index for s in steps]
    for step in steps:
        assert not step.drift, step.index
        assert step.action_ids and len(step.action_logprobs) == len(step.action_ids)
    for prev, step in itertools.pairwise(steps):
        head = prev.observation_ids + prev.action_ids
        assert step.observation_ids[: len(head)] == head, f"step {step.index} does not extend step {prev.index}"
        assert step.parent_index == prev.index
        assert prev.feedback_ids and step.observation_ids[len(head): len(head) + len(prev.feedback_ids)] == \
            prev.feedback_ids
    calls = n_steps - 1 if tool_calls is None else tool_calls
    for step in steps[:calls]:
        call = step.action["tool_calls"][0]["function"]
        assert call["name"] == "calculator" and "expression" in json.loads(call["arguments"])
        assert step.finish_reason == "tool_calls"
    for step in steps[calls:]:
        assert not step.action.get("tool_calls")
    return steps


def run_sessions(store: Any, run_id: str) -> list[Any]:
    return store.list_sessions(run_id, limit=1000)


def new_run() -> str:
    return f"run-{uuid.uuid4().hex[:8]}"


def load_example(name: str) -> ModuleType:
    """Import an example agent from examples/agents/ by file name."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
