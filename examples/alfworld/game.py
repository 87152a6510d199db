"""An ALFWorld text game played from a ``game.tw-pddl`` file, without TextWorld or a planner.

TextWorld plays these files through Fast Downward (``fast-downward-textworld``), which PyPI ships only
as C++ source; on a shared 2-core machine its build did not finish in the time allowed, and every fresh
CI machine would have to repeat it. This module plays the same games from their PDDL directly:

- the actions of ALFWorld's ``alfred`` domain (go to, open, close, take, move, heat, cool, clean, use,
  slice, examine, inventory, look, help) with the domain's preconditions and effects;
- ALFWorld's command vocabulary and observation texts, as the game file's grammar writes them
  ("You arrive at desk 1. On the desk 1, you see a pen 1, and a mug 2.", "Nothing happens.");
- ALFWorld's object names: identifiers grouped by lower-cased class, numbered 1..n within a class in
  reverse sorted-identifier order (what ALFWorld's demangler does), so the shipped expert walkthroughs
  name the same objects;
- the goal check from the problem's PDDL goal.

Known differences from TextWorld: items of a list are in name order (TextWorld follows its planner's
fact order), and "go to" is not offered for the receptacle the agent already stands at.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from examples.alfworld.pddl import Fact, Facts, Problem, holds, parse_problem

AGENT = "agent1"
INVALID = "Nothing happens."
HELP = """
Available commands:
  look:                             look around your current location
  inventory:                        check your current inventory
  go to (receptacle):               move to a receptacle
  open (receptacle):                open a receptacle
  close (receptacle):               close a receptacle
  take (object) from (receptacle):  take an object from a receptacle
  move (object) to (receptacle):  place an object in or on a receptacle
  examine (something):              examine a receptacle or an object
  use (object):                     use an object
  heat (object) with (receptacle):  heat an object using a receptacle
  clean (object) with (receptacle): clean an object using a receptacle
  cool (object) with (receptacle):  cool an object using a receptacle
  slice (object) with (object):     slice an object using a sharp object
"""
_TASK = re.compile(r"Your task is to: ([^\"]*)")
_APPLIANCE = {"heat": ("microwavetype",), "cool": ("fridgetype",), "clean": ("sinktype", "sinkbasintype")}
_ABILITY = {"heat": "heatable", "cool": "coolable", "clean": "cleanable"}
_EFFECT = {"heat": ("ishot", "iscool"), "cool": ("iscool", "ishot"), "clean": ("isclean", None)}


def alfworld_names(identifiers: set[str]) -> dict[str, str]:
    """Identifier -> ALFWorld display name ("apple_bar__minus_00_dot_75_bar_..." -> "apple 2")."""
    def base(identifier: str) -> str:
        name = identifier.split("_bar_", 1)[0]
        return name + "basin" if "basin" in identifier else name

    numbered = sorted(i for i in identifiers if "_bar_" in i)
    remaining = Counter(base(i) for i in numbered)
    names = {i: i for i in identifiers if "_bar_" not in i}
    for identifier in numbered:  # the first identifier of a class gets the highest number
        name = base(identifier)
        names[identifier] = f"{name} {remaining[name]}"
        remaining[name] -= 1
    return names


def _listing(names: list[str], article: str = "a ") -> str:
    """TextWorld's list grammar: "a x 1", "a x 1, and a y 2", "a x, a y, and a z"; empty: "nothing"."""
    items = [f"{article}{n}" for n in sorted(names, key=_natural)]
    if not items:
        return "nothing"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + ", and " + items[-1]


def _natural(name: str) -> tuple[str, int]:
    base, _, number = name.rpartition(" ")
    return (base, int(number)) if number.isdigit() else (name, 0)


@dataclass
class Outcome:
    """What one command did: the text the player reads, whether it was admissible, whether the goal holds."""

    feedback: str
    valid: bool
    won: bool


class AlfredGame:
    """One game: ``AlfredGame.load(path)``, then :meth:`intro`, :meth:`admissible_commands`, :meth:`step`."""

    def __init__(self, problem: Problem, task: str) -> None:
        self.problem, self.task = problem, task
        self.facts: set[Fact] = set(problem.init)
        self.names = alfworld_names({a for fact in problem.init for a in fact[1:]})
        self.ids = {name: identifier for identifier, name in self.names.items()}
        self.receptacles = sorted((r for r in problem.by_type.get("receptacle", []) if r in self.names),
                                  key=lambda r: _natural(self.names[r]))
        self.location_of = {f[1]: f[2] for f in problem.init if f[0] == "receptacleatlocation"}
        self.type_of = {f[1]: f[2] for f in problem.init if f[0] in ("objecttype", "receptacletype")}
        self.moves = 0

    @classmethod
    def load(cls, path: str | Path) -> AlfredGame:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        task = _TASK.search(data.get("grammar", ""))
        if task is None:
            raise ValueError(f"{path}: the grammar has no 'Your task is to: ...' line")
        return cls(parse_problem(data["pddl_problem"]), task.group(1).strip())

    # ---- state queries -------------------------------------------------------------------------
    def _has(self, *fact: str) -> bool:
        return tuple(fact) in self.facts

    def _with(self, predicate: str, first: str) -> list[str]:
        return [f[2] for f in self.facts if f[0] == predicate and f[1] == first]

    def _inside(self, receptacle: str) -> list[str]:
        return [f[1] for f in self.facts if f[0] == "inreceptacle" and f[2] == receptacle]

    @property
    def location(self) -> str:
        return next(f[2] for f in self.facts if f[0] == "atlocation" and f[1] == AGENT)

    def here(self) -> list[str]:
        """The receptacles at the agent's location."""
        return [r for r in self.receptacles if self.location_of.get(r) == self.location]

    def held(self) -> list[str]:
        return self._with("holds", AGENT)

    def _reachable(self, receptacle: str) -> bool:
        return not self._has("openable", receptacle) or self._has("opened", receptacle)

    def won(self) -> bool:
        return holds(self.problem.goal, Facts(self.facts), self.problem)

    # ---- texts -----------------------------------------------------------------------------------
    def _n(self, identifier: str) -> str:
        return self.names[identifier]

    def describe_receptacle(self, r: str) -> str:
        inside = _listing([self._n(o) for o in self._inside(r)])
        if self._has("openable", r):
            return f"The {self._n(r)} is open. In it, you see {inside}." if self._has("opened", r) \
                else f"The {self._n(r)} is closed."
        return f"On the {self._n(r)}, you see {inside}."

    def describe_object(self, o: str) -> str:
        name = self._n(o)
        if self._has("isreceptacleobject", o):
            inner = [f[1] for f in self.facts if f[0] == "inreceptacleobject" and f[2] == o]
            return f"This is a normal {name}. In it, you see {_listing([self._n(i) for i in inner])}."
        states = [s for s, pred in (("hot", "ishot"), ("cool", "iscool")) if self._has(pred, o)]
        clean, sliced = self._has("isclean", o), self._has("issliced", o)
        if sliced or (clean and states):
            words = " and ".join([*states, *(["clean"] if clean else [])])
            return f"This is a {words + ' ' if words else ''}{'sliced ' if sliced else ''}{name}."
        if states:
            return f"This is a {'hot' if states[0] == 'hot' else 'cold'} {name}."
        if clean:
            return f"This is a clean {name}."
        if self._has("toggleable", o):
            return f"This {name} is {'on' if self._has('istoggled', o) else 'off'}."
        return f"There's nothing special about {name}."

    def look(self) -> str:
        here = self.here()
        if not here:
            everything = _listing([self._n(r) for r in self.receptacles])
            return f"You are in the middle of a room. Looking quickly around you, you see {everything}."
        on_floor = [f[1] for f in self.facts if f[0] == "objectatlocation" and f[2] == self.location
                    and not any(self._has("inreceptacle", f[1], r) for r in here)]
        facing = _listing([self._n(r) for r in here], article="")
        return f"You are facing the {facing}. Next to it, you see {_listing([self._n(o) for o in on_floor])}."

    def inventory(self) -> str:
        held = self.held()
        return f"You are carrying: {_listing([self._n(o) for o in held])}." if held else \
            "You are not carrying anything."

    def intro(self) -> str:
        return f"-= Welcome to TextWorld, ALFRED! =-\n\n{self.look()}\n\nYour task is to: {self.task}"

    # ---- commands --------------------------------------------------------------------------------
    def _actions(self) -> dict[str, tuple[str, ...]]:
        """Admissible command -> (verb, identifiers...)."""
        here, held = self.here(), self.held()
        acts: dict[str, tuple[str, ...]] = {"look": ("look",), "inventory": ("inventory",), "help": ("help",)}
        for r in self.receptacles:
            if r not in here:
                acts[f"go to {self._n(r)}"] = ("goto", r)
        for r in here:
            acts[f"examine {self._n(r)}"] = ("examine_r", r)
            if self._has("openable", r):
                verb = "close" if self._has("opened", r) else "open"
                acts[f"{verb} {self._n(r)}"] = (verb, r)
            for o in self._inside(r):
                if self._reachable(r):
                    acts[f"examine {self._n(o)}"] = ("examine_o", o)
                    if self._has("pickupable", o) and not held:
                        acts[f"take {self._n(o)} from {self._n(r)}"] = ("take", o, r)
                if self._has("toggleable", o):
                    acts[f"use {self._n(o)}"] = ("use", o)
            for o in held:
                if self._reachable(r) and self._has("cancontain", self.type_of.get(r, ""), self.type_of.get(o, "")):
                    acts[f"move {self._n(o)} to {self._n(r)}"] = ("move", o, r)
                for verb, kinds in _APPLIANCE.items():
                    if self.type_of.get(r) in kinds and self._has(_ABILITY[verb], o):
                        acts[f"{verb} {self._n(o)} with {self._n(r)}"] = (verb, o, r)
        for o in held:
            acts[f"examine {self._n(o)}"] = ("examine_o", o)
            if self.type_of.get(o) in ("knifetype", "butterknifetype"):
                for co in [f[1] for f in self.facts if f[0] == "objectatlocation" and f[2] == self.location]:
                    if self._has("sliceable", co):
                        acts[f"slice {self._n(co)} with {self._n(o)}"] = ("slice", co, o)
        return acts

    def admissible_commands(self) -> list[str]:
        return sorted(self._actions())

    def step(self, command: str) -> Outcome:
        """Apply ``command`` (ALFWorld's exact wording, case and surrounding spaces ignored)."""
        action = self._actions().get(" ".join(str(command).lower().split()))
        if action is None:
            return Outcome(INVALID, valid=False, won=self.won())
        self.moves += 1
        return Outcome(self._apply(action), valid=True, won=self.won())

    def _apply(self, action: tuple[str, ...]) -> str:
        verb, *args = action
        if verb == "look":
            return self.look()
        if verb == "inventory":
            return self.inventory()
        if verb == "help":
            return HELP
        if verb == "examine_r":
            return self.describe_receptacle(args[0])
        if verb == "examine_o":
            return self.describe_object(args[0])
        if verb == "goto":
            (r,) = args
            self.facts = {f for f in self.facts if not (f[0] == "atlocation" and f[1] == AGENT)}
            self.facts.add(("atlocation", AGENT, self.location_of[r]))
            return f"You arrive at {self._n(r)}. {self.describe_receptacle(r)}"
        if verb == "open":
            self.facts |= {("opened", args[0]), ("checked", args[0])}
            return f"You open the {self._n(args[0])}. {self.describe_receptacle(args[0])}"
        if verb == "close":
            self.facts.discard(("opened", args[0]))
            return f"You close the {self._n(args[0])}."
        if verb == "take":
            o, r = args
            self.facts -= {("inreceptacle", o, r), ("objectatlocation", o, self.location)}
            self.facts |= {("holds", AGENT, o), ("holdsany", AGENT)}
            return f"You pick up the {self._n(o)} from the {self._n(r)}."
        if verb == "move":
            o, r = args
            self.facts -= {("holds", AGENT, o), ("holdsany", AGENT)}
            self.facts |= {("inreceptacle", o, r), ("objectatlocation", o, self.location)}
            return f"You move the {self._n(o)} to the {self._n(r)}."
        if verb in _EFFECT:
            o, r = args
            gained, lost = _EFFECT[verb]
            self.facts.add((gained, o))
            if lost:
                self.facts.discard((lost, o))
            return f"You {verb} the {self._n(o)} using the {self._n(r)}."
        if verb == "use":
            (o,) = args
            self.facts ^= {("ison", o)}
            self.facts.add(("istoggled", o))
            return f"You turn on the {self._n(o)}."  # the grammar tests istoggled, which toggling always sets
        if verb == "slice":
            co, ko = args
            self.facts.add(("issliced", co))
            return f"You sliced the {self._n(co)} with the {self._n(ko)}."
        raise AssertionError(f"unhandled action {action!r}")
