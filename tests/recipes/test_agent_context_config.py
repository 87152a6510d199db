"""``agent.context``: the trainer config field that gives every rollout session a gateway context policy."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agentr1.trainer.config import AgentConfig, JobConfig


def test_the_policy_is_validated_and_normalised_when_the_config_loads():
    assert AgentConfig(entrypoint="m:f").context is None
    assert AgentConfig(entrypoint="m:f", context="summary").context["policy"] == "summary"
    window = JobConfig.from_yaml(Path(__file__).resolve().parents[2] / "examples/hotpotqa/train.yaml").agent
    assert window is not None and window.context == {"policy": "sliding_window", "keep_last_turns": 2}
    with pytest.raises(ValidationError, match="unknown context policy 'windowed'; valid: append_only"):
        AgentConfig(entrypoint="m:f", context={"policy": "windowed"})
    with pytest.raises(ValidationError, match="keep_last_turns"):
        AgentConfig(entrypoint="m:f", context={"policy": "sliding_window", "keep_last_turns": "many"})
    with pytest.raises(ValidationError, match="applies to `entrypoint` agents"):
        AgentConfig(command=["python", "agent.py"], context="sliding_window")
