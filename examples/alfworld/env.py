"""ALFWorld as an :class:`agentr1.envs.AgentEnv`: the model reads the game's text and replies with one
command per turn.

Rewards, from the environment:
- process: ``-invalid_penalty`` on each step whose reply is not an admissible command (the game
  answers "Nothing happens."), reported on that step by :class:`AgentEnvLoop`;
- success: ``success_reward`` as the episode's outcome once the goal holds (the episode ends then),
  reported to the session as an outcome reward (source "environment"), so the trainer's success
  metrics and GRPO's group baseline see it, and it is counted once.

Context (Agent-R1's environment-defined ``o_{t+1} = C(z_0..z_t)``): the system prompt, the game's
introduction with the task, then a sliding window of the last ``keep_last_turns`` exchanges
(the model's reply, the game's answer); only the newest answer lists the admissible commands, which
keeps prompts short on CPU. Older turns drop out, so each step is a fresh render of the prompt.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from examples.alfworld.game import AlfredGame

from agentr1.envs import AgentEnv, StepResult, register_env
from agentr1.envs.tool_env import clean_action
from agentr1.sdk import areward, current_session

DATA_DIR = Path(__file__).parent / "data"
SYSTEM = ("You are in a household text game. Reach the goal of the task. Each turn, reply with exactly one "
          "command from the list of admissible commands, copied as it is, and nothing else.")
_ACTION_PREFIX = re.compile(r"(?:action|command)\s*:", re.IGNORECASE)


def parse_command(text: str | None) -> str:
    """The command in a reply: what follows the last ``Action:`` (or ``Command:``), else its first
    non-empty line; quotes, a leading ``>`` and a trailing period dropped, lower-cased."""
    text = text or ""
    markers = list(_ACTION_PREFIX.finditer(text))
    if markers:
        text = text[markers[-1].end():]
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = line.strip().strip("`'\"").lstrip(">").strip().rstrip(".").strip()
    return " ".join(line.lower().split())


def resolve_gamefile(gamefile: str | Path) -> Path:
    """A game file path as given, or relative to the recipe's data folder (rows carry relative paths)."""
    path = Path(gamefile)
    if not path.is_absolute() and not path.exists():
        path = DATA_DIR / path
    if not path.is_file():
        raise FileNotFoundError(f"ALFWorld game file {gamefile!r} not found (also looked in {DATA_DIR})")
    return path


@register_env("alfworld")
class AlfworldEnv(AgentEnv):
    """``AlfworldEnv(task, gamefile=..., ...)``; ``gamefile`` defaults to the task row's ``gamefile``."""

    def __init__(self, task: dict[str, Any], *, gamefile: str | None = None, keep_last_turns: int = 3,
                 invalid_penalty: float = 0.1, success_reward: float = 1.0) -> None:
        chosen = gamefile or task.get("gamefile")
        if not chosen:
            raise ValueError(f"task {task.get('id', '?')!r}: AlfworldEnv needs a `gamefile` (env_kwargs or task)")
        self.gamefile = resolve_gamefile(chosen)
        self._configure(task, keep_last_turns, invalid_penalty, success_reward)

    def _configure(self, task: dict[str, Any], keep_last_turns: int, invalid_penalty: float,
                   success_reward: float) -> None:
        if not isinstance(keep_last_turns, int) or keep_last_turns < 0:
            raise ValueError(f"keep_last_turns must be a non-negative int, got {keep_last_turns!r}")
        self.task, self.tools = task, []
        self.keep_last_turns, self.invalid_penalty, self.success_reward = keep_last_turns, invalid_penalty, success_reward
        self.game: AlfredGame | None = None
        self.intro = ""
        self.turns: list[tuple[dict[str, Any], str]] = []  # (the model's message, the game's answer)

    def load_game(self) -> AlfredGame:
        """A fresh game for the episode (from the game file here; generated games build theirs)."""
        return AlfredGame.load(self.gamefile)

    async def reset(self) -> list[dict[str, Any]]:
        self.game = self.load_game()
        self.intro, self.turns = self.game.intro(), []
        return self.observation()

    def observation(self) -> list[dict[str, Any]]:
        assert self.game is not None
        admissible = "Admissible commands: " + ", ".join(self.game.admissible_commands())
        messages = [{"role": "system", "content": SYSTEM}]
        window = self.turns[len(self.turns) - self.keep_last_turns:] if self.keep_last_turns else []
        if not window:
            return [*messages, {"role": "user", "content": f"{self.intro}\n\n{admissible}"}]
        messages.append({"role": "user", "content": self.intro})
        for i, (action, answer) in enumerate(window):
            last = i == len(window) - 1
            messages += [action, {"role": "user", "content": f"{answer}\n\n{admissible}" if last else answer}]
        return messages

    def anchor(self) -> str | None:
        """GiGPO's state: the game's facts (where the agent is, what it holds, what is open, hot, clean, ...)
        hashed. Episodes of one game in the same state share it, whatever commands led there (an invalid
        command leaves it as it was); the prompt cannot serve, as its window of recent turns differs."""
        if self.game is None:
            return None
        return "alfworld-state " + hashlib.sha256(repr(sorted(self.game.facts)).encode()).hexdigest()[:16]

    async def step(self, action: dict[str, Any]) -> StepResult:
        if self.game is None:
            raise RuntimeError("step() before reset()")
        message = clean_action(action)
        command = parse_command(message.get("content"))
        outcome = self.game.step(command)
        self.turns.append((message, outcome.feedback))
        if outcome.won and current_session() is not None:
            await areward(self.success_reward, name="success", source="environment")
        reward = 0.0 if outcome.valid else -self.invalid_penalty
        info = {"command": command, "valid": outcome.valid, "won": outcome.won, "feedback": outcome.feedback}
        return StepResult(self.observation(), reward, outcome.won, info)
