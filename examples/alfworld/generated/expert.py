"""Planner experts that solve any generated game, as command lists the engine checks while they are made.

Both plan per task type (find the object, take it, heat / cool / clean it at the appliance, put it in the
target, or carry it to a desk lamp and switch the lamp on) and play every command through the game
engine as they go: a command the engine does not admit stops the plan with :class:`ExpertError`, and
:func:`expert_commands` checks that the goal holds exactly after the last one.

- ``oracle``: knows where everything is (reads the game state) and goes straight to the first object of
  the type in the room's listed order.
- ``search``: knows only what it has seen. It visits the receptacles in the order the room's description
  lists them (opening closed ones) until it has seen what it needs, then acts. Each of its commands
  follows from what the player has been shown, which makes it the demonstration a policy can imitate.
"""

from __future__ import annotations

from examples.alfworld.game import AlfredGame, _natural
from examples.alfworld.generated.generator import LAMP, GeneratedGame

__all__ = ["EXPERTS", "ExpertError", "expert_commands"]

EXPERTS = ("oracle", "search")


class ExpertError(RuntimeError):
    """The expert could not finish the game (a command not admitted, or nothing left to try)."""


class _Player:
    """Plays commands on a live game, remembering what it has been shown."""

    def __init__(self, game: AlfredGame) -> None:
        self.game, self.won = game, False
        self.commands: list[str] = []
        self.seen: dict[str, list[str]] = {}  # receptacle -> objects seen in it when last looked at

    def do(self, command: str) -> None:
        if self.won:
            raise ExpertError(f"the goal already holds; not playing {command!r}")
        outcome = self.game.step(command)
        if not outcome.valid:
            raise ExpertError(f"{command!r} is not admissible after {self.commands}")
        self.commands.append(command)
        self.won = outcome.won

    def name(self, identifier: str) -> str:
        return self.game.names[identifier]

    def look_into(self, r: str) -> None:
        if self.game._reachable(r):
            self.seen[r] = self.game._inside(r)

    def go(self, r: str, *, open_it: bool = True) -> None:
        if self.game.location != self.game.location_of[r]:
            self.do(f"go to {self.name(r)}")
        if open_it and self.game._has("openable", r) and not self.game._has("opened", r):
            self.do(f"open {self.name(r)}")
        self.look_into(r)

    def take(self, o: str, r: str) -> None:
        self.go(r)
        self.do(f"take {self.name(o)} from {self.name(r)}")
        self.look_into(r)

    def put(self, o: str, r: str) -> None:
        self.go(r)
        self.do(f"move {self.name(o)} to {self.name(r)}")
        self.look_into(r)


def _of_type(game: AlfredGame, kind: str) -> list[str]:
    """The receptacles (or objects) of type ``kind``, in the order the room lists them."""
    return sorted((i for i, t in game.type_of.items() if t == kind), key=lambda i: _natural(game.names[i]))


def _find(player: _Player, wanted: str, skip: set[str], oracle: bool) -> tuple[str, str]:
    """An object of type ``wanted`` and the receptacle holding it, outside the receptacles ``skip``:
    the oracle reads the state; the searcher visits receptacles in listed order until it sees one."""
    game = player.game
    for r in game.receptacles:  # the listed order
        if r in skip:
            continue
        if not oracle and r not in player.seen:
            player.go(r)
        inside = game._inside(r) if oracle else player.seen.get(r, [])
        hits = sorted((o for o in inside if game.type_of.get(o) == wanted), key=lambda o: _natural(game.names[o]))
        if hits:
            return hits[0], r
    raise ExpertError(f"no {wanted} left outside {sorted(player.name(r) for r in skip)}")


def expert_commands(generated: GeneratedGame, kind: str = "oracle") -> list[str]:
    """The ``kind`` expert's commands for ``generated`` (see the module docstring); the goal holds after
    the last command and not before."""
    if kind not in EXPERTS:
        raise ValueError(f"unknown expert {kind!r}; choose one of {list(EXPERTS)}")
    oracle, goal = kind == "oracle", generated.goal
    player = _Player(generated.game())
    game = player.game
    if goal.task_type == "look_at_obj_in_light":
        o, r = _find(player, goal.otype, set(), oracle)
        player.take(o, r)
        lamp, holder = _find(player, LAMP, set(), oracle)
        player.go(holder)
        player.do(f"use {player.name(lamp)}")
    else:
        targets = _of_type(game, goal.rtype or "")
        for _ in range(2 if goal.task_type == "pick_two_obj_and_place" else 1):
            o, r = _find(player, goal.otype, set(targets), oracle)
            player.take(o, r)
            if goal.appliance:
                appliance = _of_type(game, goal.appliance)[0]
                player.go(appliance, open_it=False)  # heating, cooling and cleaning work on a closed one
                verb = {"sinkbasintype": "clean", "microwavetype": "heat", "fridgetype": "cool"}[goal.appliance]
                player.do(f"{verb} {player.name(o)} with {player.name(appliance)}")
            player.put(o, targets[0])
    if not player.won:
        raise ExpertError(f"the plan {player.commands} ended without reaching the goal of {generated.task!r}")
    return player.commands
