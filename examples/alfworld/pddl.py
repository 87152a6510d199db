"""The small part of PDDL that ALFWorld's game files use: s-expressions, the problem's objects, its
initial facts and its goal, and a goal check (``and``, ``or``, ``not``, ``=``, typed ``exists``).

Names are lower-cased, as Fast Downward (TextWorld's planner) does: PDDL is case-insensitive, and
ALFWorld's object names ("apple 2") are made from the lower-cased identifiers.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

Sexp = str | list["Sexp"]
Fact = tuple[str, ...]

_TOKEN = re.compile(r"[()]|[^\s()]+")


class PddlError(ValueError):
    """A game file whose PDDL this module cannot read (the message says where)."""


def parse_sexp(text: str) -> Sexp:
    """One s-expression; ``;`` comments are dropped, atoms lower-cased."""
    tokens = _TOKEN.findall("\n".join(line.split(";", 1)[0] for line in text.splitlines()).lower())
    stack: list[list[Sexp]] = [[]]
    for token in tokens:
        if token == "(":
            stack.append([])
        elif token == ")":
            if len(stack) == 1:
                raise PddlError("unbalanced ')' in PDDL text")
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(token)
    if len(stack) != 1 or len(stack[0]) != 1:
        raise PddlError("PDDL text is not exactly one balanced s-expression")
    return stack[0][0]


def typed_names(items: list[Sexp]) -> list[tuple[str, str]]:
    """``a b - t c - u`` -> ``[(a, t), (b, t), (c, u)]`` (PDDL's typed lists)."""
    out: list[tuple[str, str]] = []
    pending: list[str] = []
    it = iter(items)
    for item in it:
        if not isinstance(item, str):
            raise PddlError(f"expected a name in a typed list, got {item!r}")
        if item == "-":
            kind = next(it, None)
            if not isinstance(kind, str):
                raise PddlError("a '-' in a typed list must be followed by a type name")
            out += [(name, kind) for name in pending]
            pending = []
        else:
            pending.append(item)
    return out + [(name, "object") for name in pending]


@dataclass
class Problem:
    """A PDDL problem: typed objects, the initial facts (numeric ``(= ...)`` entries dropped) and the goal."""

    objects: dict[str, str]  # name -> type
    init: set[Fact]
    goal: Sexp
    by_type: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        groups: dict[str, list[str]] = defaultdict(list)
        for name, kind in self.objects.items():
            groups[kind].append(name)
        self.by_type = dict(groups)


def _section(problem: list[Sexp], key: str) -> list[Sexp]:
    for part in problem:
        if isinstance(part, list) and part and part[0] == key:
            return part
    raise PddlError(f"the PDDL problem has no {key} section")


def parse_problem(text: str) -> Problem:
    tree = parse_sexp(text)
    if not isinstance(tree, list) or tree[:1] != ["define"]:
        raise PddlError("a PDDL problem starts with (define ...)")
    objects = dict(typed_names(_section(tree, ":objects")[1:]))
    init: set[Fact] = set()
    for fact in _section(tree, ":init")[1:]:
        if not isinstance(fact, list) or not fact or not all(isinstance(a, str) for a in fact):
            continue  # numeric fluents such as (= (distance a b) 3): the game's text never uses them
        if fact[0] != "=":
            init.add(tuple(fact))  # type: ignore[arg-type]
    goal = _section(tree, ":goal")
    if len(goal) != 2:
        raise PddlError("the :goal section must hold one formula")
    return Problem(objects=objects, init=init, goal=goal[1])


class Facts:
    """A set of ground facts indexed by predicate, for the goal check's matching."""

    def __init__(self, facts: set[Fact]) -> None:
        self.all = facts
        self.by_predicate: dict[str, list[Fact]] = defaultdict(list)
        for fact in facts:
            self.by_predicate[fact[0]].append(fact)


def holds(formula: Sexp, facts: Facts, problem: Problem, bindings: dict[str, str] | None = None) -> bool:
    """Whether ``formula`` is true in ``facts`` (closed world), variables resolved through ``bindings``."""
    env = bindings or {}
    if not isinstance(formula, list) or not formula:
        raise PddlError(f"not a formula: {formula!r}")
    head, args = formula[0], formula[1:]
    if head == "and":
        return _satisfy(list(args), {}, facts, problem, env)
    if head == "or":
        return any(holds(arg, facts, problem, env) for arg in args)
    if head == "not":
        return not holds(args[0], facts, problem, env)
    if head == "exists":
        if len(args) != 2 or not isinstance(args[0], list):
            raise PddlError(f"malformed exists: {formula!r}")
        free = dict(typed_names(args[0]))
        return _satisfy([args[1]], free, facts, problem, env)
    values = [env.get(a, a) if isinstance(a, str) else a for a in args]
    if head == "=":
        return values[0] == values[1]
    return tuple([head, *values]) in facts.all


def _unify(pattern: list[Sexp], fact: Fact, free: dict[str, str], env: dict[str, str]) -> dict[str, str] | None:
    if len(pattern) != len(fact):
        return None
    out = dict(env)
    for term, value in zip(pattern[1:], fact[1:], strict=True):
        assert isinstance(term, str)
        if term in free and term not in out:
            out[term] = value
        elif out.get(term, term) != value:
            return None
    return out


def _candidates(free: dict[str, str], env: dict[str, str], problem: Problem) -> Iterator[tuple[str, str]]:
    """The first still-unbound variable and each object of its type (the fallback when no fact binds it)."""
    for var, kind in free.items():
        if var not in env:
            for name in problem.by_type.get(kind, []):
                yield var, name
            return


def _satisfy(conjuncts: list[Sexp], free: dict[str, str], facts: Facts, problem: Problem,
             env: dict[str, str]) -> bool:
    """Backtracking search for values of the ``free`` variables that make every conjunct true: a
    positive atom mentioning an unbound variable binds it from the matching facts; other conjuncts are
    checked once their variables are bound."""
    flat: list[Sexp] = []
    todo = list(conjuncts)
    while todo:  # flatten nested ands, and lift a positive exists's variables into this search
        c = todo.pop(0)
        if isinstance(c, list) and c[:1] == ["and"]:
            todo = c[1:] + todo
        elif isinstance(c, list) and c[:1] == ["exists"] and len(c) == 3 and isinstance(c[1], list):
            free = {**free, **dict(typed_names(c[1]))}
            todo.insert(0, c[2])
        else:
            flat.append(c)
    unbound = {v for v in free if v not in env}
    for i, c in enumerate(flat):
        assert isinstance(c, list)
        if c[0] not in ("and", "or", "not", "exists", "=") and unbound & set(c[1:]):
            rest = flat[:i] + flat[i + 1:]
            return any(_satisfy(rest, free, facts, problem, new)
                       for fact in facts.by_predicate.get(c[0], [])  # type: ignore[arg-type]
                       if (new := _unify(c, fact, free, env)) is not None)
    if unbound:
        return any(_satisfy(flat, free, facts, problem, {**env, var: name})
                   for var, name in _candidates(free, env, problem))
    return all(holds(c, facts, problem, env) for c in flat)
