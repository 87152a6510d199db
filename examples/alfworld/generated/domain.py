"""What the shipped ALFWorld games say about the ``alfred`` domain's world, read from their PDDL problems.

New games are built only from facts the 36 shipped game files state, so a generated game stays inside
the shipped domain: the object types and their abilities (``pickupable``, ``heatable``, ``coolable``,
``cleanable``, ``sliceable``, ``toggleable``, ``isreceptacleobject``), which receptacle types open
(``openable``), which receptacle types can hold which object types (``cancontain``), and per room (the
four AI2-THOR scenes the games come from: a kitchen, a living room, a bedroom and a bathroom) its
receptacle types with their counts and the (object type, receptacle type) placements seen there.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache

from examples.alfworld.data import DATA_DIR, load_index
from examples.alfworld.pddl import parse_problem

__all__ = ["ABILITIES", "Domain", "Room", "load_domain"]

ABILITIES = ("pickupable", "heatable", "coolable", "cleanable", "sliceable", "toggleable", "isreceptacleobject")
ROOM_NAMES = {"10": "kitchen", "219": "livingroom", "308": "bedroom", "424": "bathroom"}  # AI2-THOR scene ids


@dataclass(frozen=True)
class Room:
    """One scene kind: its receptacle types with the most of each seen in one game, and where objects lie."""

    name: str
    receptacles: dict[str, int]  # receptacle type -> count in the shipped games of this scene
    placements: frozenset[tuple[str, str]]  # (object type, receptacle type) pairs seen in this scene

    def objects_for(self, rtype: str) -> list[str]:
        return sorted(o for o, r in self.placements if r == rtype)


@dataclass(frozen=True)
class Domain:
    abilities: dict[str, frozenset[str]]  # object type -> its abilities (ABILITIES)
    openable: frozenset[str]  # receptacle types that open and close
    can_contain: frozenset[tuple[str, str]]  # (receptacle type, object type)
    rooms: dict[str, Room]  # room name -> Room

    def has(self, otype: str, ability: str) -> bool:
        return ability in self.abilities.get(otype, frozenset())


@lru_cache(maxsize=1)
def load_domain() -> Domain:
    """The domain facts of all shipped games (cached: parsing the 36 problems takes a moment)."""
    abilities: dict[str, set[str]] = defaultdict(set)
    openable: set[str] = set()
    can_contain: set[tuple[str, str]] = set()
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    placements: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for entry in load_index():
        scene = entry["gamefile"].split("/")[2].rsplit("-", 1)[1]
        room = ROOM_NAMES.get(scene)
        if room is None:
            raise ValueError(f"{entry['gamefile']}: scene {scene} is not one of {sorted(ROOM_NAMES)}")
        problem = parse_problem(json.loads((DATA_DIR / entry["gamefile"]).read_text(encoding="utf-8"))["pddl_problem"])
        otype = {f[1]: f[2] for f in problem.init if f[0] == "objecttype"}
        rtype = {f[1]: f[2] for f in problem.init if f[0] == "receptacletype"}
        per_type: dict[str, int] = defaultdict(int)
        for kind in rtype.values():
            per_type[kind] += 1
        for kind, n in per_type.items():
            counts[room][kind] = max(n, counts[room].get(kind, 0))
        for fact in problem.init:
            if fact[0] in ABILITIES and fact[1] in otype:
                abilities[otype[fact[1]]].add(fact[0])
            elif fact[0] == "openable" and fact[1] in rtype:
                openable.add(rtype[fact[1]])
            elif fact[0] == "cancontain":
                can_contain.add((fact[1], fact[2]))
            elif fact[0] == "inreceptacle" and fact[1] in otype and fact[2] in rtype:
                placements[room].add((otype[fact[1]], rtype[fact[2]]))
    rooms = {name: Room(name, dict(sorted(counts[name].items())), frozenset(placements[name])) for name in counts}
    return Domain({k: frozenset(v) for k, v in sorted(abilities.items())}, frozenset(openable),
                  frozenset(can_contain), rooms)
