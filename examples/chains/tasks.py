"""Arithmetic chains: generated multi-step problems whose every step needs the calculator.

A chain starts from a number and applies 2-4 operations in order ("Start with 47. Multiply it by 23,
then subtract 318, then add 905."). The calculator tool (``env.py``) does one operation on two
numbers per call, so a chain of k operations takes k calls, each on the previous call's result:
multi-turn tool use a 135M model cannot replace by mental arithmetic (multi-digit operands and
results up to seven digits).

Splits (train, val, test) are disjoint by construction. Every *computation* of a chain (``a op b``, with the
operands of ``+`` and ``*`` sorted, so ``5 * 3`` and ``3 * 5`` are one computation) and its final answer are
each hashed to a split (:func:`split_of`: half of them to train, a quarter each to val and test); a generated chain
belongs to a split only if all of them hash there, and is otherwise drawn again. So a chain of one split shares no
step (no operand pair, no swapped twin), no operand tuple, no question and no final answer with any chain of
another, whatever the seeds and sizes. ``tests/recipes/test_chains_tasks.py`` checks it. (Before the test split,
val had the whole held-out half: training chains are the same as then, and today's val and test chains were both
held out then.)

Rows are Agent-R1 rows for ``agentr1.envs:run_task`` (``prompt``, ``agent_name``, ``env_kwargs``,
``reward_model``), plus ``answer``, ``ops`` and ``steps`` (the expert's computations).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SPLITS",
    "Chain",
    "chain_keys",
    "generate_chains",
    "make_demo_tasks",
    "make_length_tasks",
    "make_retry_tasks",
    "make_short_tasks",
    "make_tasks",
    "split_of",
    "task_row",
]

SPLITS = ("train", "val", "test")
# the split of a computation or answer whose hash, as a fraction of 2**64, is below each bound (in order)
SPLIT_BOUNDS = (("val", 0.25), ("test", 0.5), ("train", 1.0))
MAX_VALUE = 1_000_000  # a multiplication is drawn only while the running value is below MAX_VALUE / 100
SYSTEM = ("You are a careful math assistant. Do the steps in order with the calculator, one operation per call, "
          "each on the previous result. Then reply with the final number.")
_WORDS = {"+": "add {x}", "-": "subtract {x}", "*": "multiply it by {x}"}


@dataclass(frozen=True)
class Chain:
    start: int
    ops: tuple[tuple[str, int], ...]  # (operator, operand) in order

    def steps(self) -> list[tuple[int, str, int, int]]:
        """(left, operator, right, result) of each calculator call, in order."""
        out, value = [], self.start
        for op, x in self.ops:
            result = value + x if op == "+" else value - x if op == "-" else value * x
            out.append((value, op, x, result))
            value = result
        return out

    @property
    def answer(self) -> int:
        return self.steps()[-1][3]

    def question(self) -> str:
        parts = [_WORDS[op].format(x=x) for op, x in self.ops]
        body = ", then ".join(parts[:-1]) + (", and finally " if len(parts) > 1 else "") + parts[-1]
        return f"Start with {self.start}. {body[0].upper()}{body[1:]}. What is the result?"


def computation_key(left: int, op: str, right: int) -> str:
    """One calculator computation, with the operands of commutative operators sorted."""
    if op in "+*":
        left, right = sorted((left, right))
    return f"{left}{op}{right}"


def chain_keys(chain: Chain) -> list[str]:
    """What must not cross splits: every computation of the chain and its final answer."""
    return [computation_key(a, op, b) for a, op, b, _ in chain.steps()] + [f"={chain.answer}"]


def split_of(key: str) -> str:
    """The split a computation or an answer belongs to: a fixed hash, the same on every machine."""
    fraction = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    return next(split for split, bound in SPLIT_BOUNDS if fraction < bound)


def _draw(rng: random.Random, n_ops: int, digits: int) -> Chain:
    low, high = 10 ** (digits - 1), 10**digits - 1
    value = start = rng.randint(max(2, low), high)
    ops = []
    for _ in range(n_ops):
        choices = ["+", "-"] + (["*"] if value < MAX_VALUE // 100 else [])
        op = rng.choice(choices)
        if op == "*":
            x = rng.randint(max(2, low // 10 if digits > 2 else 2), min(99, high))
        elif op == "-" and value > 1:
            x = rng.randint(1, min(value - 1, high))  # stays positive: no signs for the model to lose
        else:
            op, x = "+", rng.randint(max(2, low), high)
        value = value + x if op == "+" else value - x if op == "-" else value * x
        ops.append((op, x))
    return Chain(start, tuple(ops))


def generate_chains(split: str, n: int, seed: int, *, min_ops: int = 2, max_ops: int = 4, digits: int = 3,
                    max_draws: int | None = None) -> list[Chain]:
    """``n`` distinct chains of ``split`` from ``seed``: 2-4 operations on ``digits``-digit numbers
    (multipliers up to two digits)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if n < 0 or not 1 <= min_ops <= max_ops or digits < 1:
        raise ValueError(f"need n >= 0, 1 <= min_ops <= max_ops and digits >= 1, got {n}, {min_ops}, {max_ops}, "
                         f"{digits}")
    rng = random.Random(f"chains/{split}/{seed}/{min_ops}-{max_ops}/{digits}")
    chains: list[Chain] = []
    seen: set[Chain] = set()
    budget = max_draws if max_draws is not None else 5000 * (n + 1)
    while len(chains) < n:
        n_ops = rng.randint(min_ops, max_ops)  # drawn first, so rejection does not favour short chains
        while True:
            budget -= 1
            if budget < 0:
                raise ValueError(f"only {len(chains)} of {n} {split} chains: the space is too small for "
                                 f"{min_ops}-{max_ops} operations on {digits}-digit numbers")
            chain = _draw(rng, n_ops, digits)
            if chain not in seen and all(split_of(k) == split for k in chain_keys(chain)):
                break
        seen.add(chain)
        chains.append(chain)
    return chains


def task_row(chain: Chain, task_id: str, *, temperature: float = 1.0, max_tokens: int = 64) -> dict[str, Any]:
    """An Agent-R1 row for ``agentr1.envs:run_task`` (the loop gets one spare call beyond the steps)."""
    return {
        "id": task_id,
        "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": chain.question()}],
        "agent_name": "examples.chains.env:ChainEnv",
        "env_kwargs": {"max_steps": len(chain.ops) + 2,
                       "sampling": {"temperature": temperature, "max_tokens": max_tokens}},
        "reward_model": {"style": "rule", "ground_truth": chain.answer, "scorer": "examples.chains.env:exact_final"},
        "answer": chain.answer,
        "start": chain.start,
        "ops": [list(o) for o in chain.ops],
        "steps": [list(s) for s in chain.steps()],
    }


def make_tasks(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """The recipe's tasks: 2-4 operations on three-digit numbers (``train.yaml``, the GPU runs)."""
    return [task_row(c, f"{split}-{i}") for i, c in enumerate(generate_chains(split, n, seed))]


def make_short_tasks(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """Two operations on two-digit numbers: the laptop demo's tasks (``scripts/demo``)."""
    chains = generate_chains(split, n, seed, min_ops=2, max_ops=2, digits=2)
    return [task_row(c, f"{split}-{i}") for i, c in enumerate(chains)]


DEMO_PROGRESS_REWARD = 0.5  # the laptop demo's process reward for a whole chain's correct calls (ChainEnv)


def make_demo_tasks(split: str, n: int, seed: int, progress_reward: float = DEMO_PROGRESS_REWARD,
                    temperature: float = 1.0) -> list[dict[str, Any]]:
    """The laptop demo's tasks: ``make_short_tasks`` with a process reward (``ChainEnv``'s
    ``progress_reward``, :data:`DEMO_PROGRESS_REWARD` for the whole chain's correct calls, on top of the
    outcome's 1 for the right final number), so that a group of a few samples of a weak policy differs in
    return far more often than in success alone; and every held-out chain sampled under a seed of its own
    (its index; the episode's k-th call under seed + k * ``SEED_STRIDE``, see ``AgentEnvLoop``; val and test alike): an evaluation
    at temperature 1 is then the same draw for the same policy, and before -> after compares the policies on
    common random numbers instead of two independent draws (the same SFT checkpoint scored 1/32, 5/32 and 7/32
    in three unseeded evaluations). Training chains stay unseeded: a
    group's samples must differ. Success is the exact final number either way. ``progress_reward``
    (``data.generator_kwargs.progress_reward``; 0: the outcome alone) replaces the default weight. ``temperature``
    (``data.generator_kwargs.temperature``, with ``actor_rollout_ref.rollout.temperature`` set to the same) is the
    training chains' sampling temperature; held-out chains keep 1, the protocol's sampled evaluation."""
    if progress_reward < 0:
        raise ValueError(f"progress_reward must be >= 0, got {progress_reward!r}")
    if not 0 < temperature <= 2:
        raise ValueError(f"temperature must be in (0, 2], got {temperature!r}")
    rows = make_short_tasks(split, n, seed)
    for index, row in enumerate(rows):
        row["env_kwargs"]["progress_reward"] = float(progress_reward)
        if split == "train":
            row["env_kwargs"]["sampling"]["temperature"] = float(temperature)
        else:
            row["env_kwargs"]["sampling"]["seed"] = index
    return rows


# Tasks that RL must teach rather than sharpen (issue 44): the warm start's demonstrations (short, clean chains,
# ``expert.py``) never show what success on these needs.


def busy_call_of(chain: Chain) -> int:
    """The calculator call of the chain that fails first time (``make_retry_tasks``): one of its operations'
    calls, fixed per chain by a hash of its question."""
    digest = hashlib.sha256(f"busy/{chain.question()}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % len(chain.ops)


def make_retry_tasks(split: str, n: int, seed: int, *, n_ops: int = 2, digits: int = 2) -> list[dict[str, Any]]:
    """Chains on a flaky calculator: ``make_short_tasks``'s chains (``n_ops`` operations on ``digits``-digit
    numbers), whose calculator answers ``error: the calculator is busy, call it again`` at one call of each
    episode (:func:`busy_call_of`; ``ChainEnv``'s ``busy_calls``), so success needs that call made again. The
    episode gets one more model call for it (operations + 3 in all)."""
    rows = []
    for i, chain in enumerate(generate_chains(split, n, seed, min_ops=n_ops, max_ops=n_ops, digits=digits)):
        row = task_row(chain, f"{split}-{i}")
        row["env_kwargs"]["busy_calls"] = [busy_call_of(chain)]
        row["env_kwargs"]["max_steps"] += 1
        rows.append(row)
    return rows


def make_length_tasks(split: str, n: int, seed: int, *, train_ops: tuple[int, int] = (2, 3),
                      val_ops: tuple[int, int] = (3, 3), digits: int = 2) -> list[dict[str, Any]]:
    """Longer chains than the demonstrations: training chains of ``train_ops`` (min, max) operations, held-out
    chains (val and test) of ``val_ops`` (by default three operations, where the two-operation warm start stops one
    short), on ``digits``-digit numbers."""
    low, high = train_ops if split == "train" else val_ops
    chains = generate_chains(split, n, seed, min_ops=low, max_ops=high, digits=digits)
    return [task_row(c, f"{split}-{i}") for i, c in enumerate(chains)]
