"""The policy's resumable state in a checkpoint's ``policy/`` folder: each model's weights, optimizer and lr schedule
through verl's checkpoint manager (``actor/``, ``critic/``), and the versions and settings (``policy_state.json``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .actor import Actor
from .config import PolicyConfig
from .critic import Critic

__all__ = ["OLD_STATE_FILE", "STATE_FILE", "load_policy_checkpoint", "save_policy_checkpoint"]

STATE_FILE = "policy_state.json"  # versions and settings
OLD_STATE_FILE = "engine_state.json"  # its name in checkpoints written by earlier releases


def save_policy_checkpoint(path: str | os.PathLike[str], actor: Actor, critic: Critic | None,
                           config: PolicyConfig) -> Path:
    """Resumable state (weights, optimizer, lr schedule, rng) of the actor and the critic under ``path``."""
    root = Path(path)
    actor.model.save_checkpoint(root / "actor", actor.version)
    if critic is not None:
        critic.model.save_checkpoint(root / "critic", critic.version)
    state = {"version": actor.version, "critic_version": critic.version if critic is not None else 0,
             "config": _jsonable(config)}
    (root / STATE_FILE).write_text(json.dumps(state, indent=2))
    return root


def load_policy_checkpoint(path: str | os.PathLike[str], actor: Actor, critic: Critic | None) -> None:
    """The state :func:`save_policy_checkpoint` wrote, back into the actor and the critic (a checkpoint without a
    critic leaves the critic's model as it is)."""
    root = Path(path)
    state_file = root / STATE_FILE
    if not state_file.is_file() and (root / OLD_STATE_FILE).is_file():
        state_file = root / OLD_STATE_FILE
    state = json.loads(state_file.read_text())
    actor.model.load_checkpoint(root / "actor")
    if critic is not None and (root / "critic").is_dir():
        critic.model.load_checkpoint(root / "critic")
    actor.version = int(state.get("version", 0))
    if critic is not None:
        critic.version = int(state.get("critic_version", 0))


def _jsonable(config: PolicyConfig) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.__dict__.items()}
