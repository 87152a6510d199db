"""The evaluation protocol's numbers: greedy pass@1, mean@K, pass@K and maj@K with bootstrap confidence
intervals, and paired tests between two policies on the same tasks.

Success at temperature 1 with one sample rewards a policy for being deterministic (sharpening), not for
knowing more: a warm start that scores 4/32 that way can score 25/32 greedily. So every evaluation reports

- ``greedy@1``: the share of tasks solved by greedy decoding (temperature 0, one sample: deterministic);
- ``mean@K``: the mean success of K independent samples per task at the sampling temperature;
- ``pass@K``: the chance that at least one of K samples succeeds, by the unbiased estimator
  ``1 - C(n - c, K) / C(n, K)`` of Chen et al. (2021) from n samples with c successes (here n = K, so it is the
  share of tasks with a success; with n > K samples it is unbiased for K);
- ``maj@K``: the success of the most common final answer among the K samples (ties: the earliest), where the
  tasks have an answer;

each with a 95% bootstrap interval over tasks (tasks resampled with replacement; the K samples of a task stay
together). Names follow verl's validation metrics: ``val-core/<data source>/acc/<metric>``.

Two policies on the same tasks are compared task by task: McNemar's exact test on greedy success (the
discordant tasks only) and a paired bootstrap of the per-task difference in mean@K.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "PairedTest",
    "TaskResult",
    "bootstrap_interval",
    "final_answer",
    "majority_success",
    "mcnemar_exact",
    "paired_bootstrap",
    "pass_at_k",
    "protocol_metrics",
]

BOOTSTRAP_RESAMPLES = 2000
LEVEL = 0.95


@dataclass
class TaskResult:
    """One task's outcomes: greedy success (None: not measured) and the sampled runs' successes and final
    answers (None where a run gave none)."""

    task_id: str
    source: str
    greedy: bool | None = None
    samples: list[bool] = field(default_factory=list)
    answers: list[str | None] = field(default_factory=list)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k from ``n`` samples with ``c`` successes (``k <= n``)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_success(successes: Sequence[bool], answers: Sequence[str | None]) -> float:
    """The success of the most common answer (ties: the one seen first); 0 when no run gave an answer."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return 0.0
    top = max(counts.values())
    winner = next(a for a in answers if a is not None and counts[a] == top)
    return float(next(s for s, a in zip(successes, answers, strict=True) if a == winner))


def bootstrap_interval(values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, level: float = LEVEL,
                       seed: int = 0, statistic: Callable[[Sequence[float]], float] | None = None
                       ) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean (or ``statistic``) of per-task ``values``."""
    if not values:
        return (0.0, 0.0)
    stat = statistic or (lambda xs: sum(xs) / len(xs))
    rng = random.Random(seed)
    n = len(values)
    return _percentiles(sorted(stat([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples)), level)


def _percentiles(draws: list[float], level: float) -> tuple[float, float]:
    """The central ``level`` interval of sorted bootstrap ``draws``."""
    tail = (1.0 - level) / 2
    return draws[int(tail * (len(draws) - 1))], draws[math.ceil((1 - tail) * (len(draws) - 1))]


def _with_interval(name: str, values: list[float], out: dict[str, float]) -> None:
    out[name] = sum(values) / len(values)
    out[f"{name}/ci_low"], out[f"{name}/ci_high"] = bootstrap_interval(values)


def protocol_metrics(results: Sequence[TaskResult], *, k: int | None = None, prefix: str = "val-core"
                     ) -> dict[str, float]:
    """The protocol's metrics per data source (see the module docstring), with their intervals and the counts
    (``n_tasks``, ``n_samples``). ``k``: the K of pass@K (default: the fewest samples any task has)."""
    out: dict[str, float] = {}
    for source in sorted({r.source for r in results}):
        mine = [r for r in results if r.source == source]
        base = f"{prefix}/{source}/acc"
        out[f"{base}/n_tasks"] = float(len(mine))
        greedy = [float(r.greedy) for r in mine if r.greedy is not None]
        if greedy:
            _with_interval(f"{base}/greedy@1", greedy, out)
        sampled = [r for r in mine if r.samples]
        if not sampled:
            continue
        n_min = min(len(r.samples) for r in sampled)
        kk = n_min if k is None else k
        if not 1 <= kk <= n_min:
            raise ValueError(f"pass@{kk} needs at least {kk} samples per task; the fewest a task has is {n_min}")
        out[f"{base}/n_samples"] = float(sum(len(r.samples) for r in sampled))
        _with_interval(f"{base}/mean@{kk}", [sum(r.samples) / len(r.samples) for r in sampled], out)
        _with_interval(f"{base}/pass@{kk}", [pass_at_k(len(r.samples), sum(r.samples), kk) for r in sampled], out)
        if all(r.answers for r in sampled) and kk > 1:
            _with_interval(f"{base}/maj@{kk}/mean", [majority_success(r.samples[:kk], r.answers[:kk])
                                                     for r in sampled], out)
    return out


@dataclass(frozen=True)
class PairedTest:
    """A paired comparison of B against A on the same tasks: ``a`` and ``b`` the means, ``diff`` = b - a, its
    95% interval, and the two-sided p-value (``method``: mcnemar or paired bootstrap). ``a_only``/``b_only``:
    the discordant tasks (McNemar)."""

    metric: str
    a: float
    b: float
    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    method: str
    tasks: int
    a_only: int = 0
    b_only: int = 0


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool], *, metric: str = "greedy@1") -> PairedTest:
    """McNemar's exact test on paired successes: under the null, each discordant task is B's with chance 1/2."""
    if len(a) != len(b) or not a:
        raise ValueError(f"need two equally long, non-empty lists of outcomes, got {len(a)} and {len(b)}")
    a_only = sum(x and not y for x, y in zip(a, b, strict=True))
    b_only = sum(y and not x for x, y in zip(a, b, strict=True))
    discordant = a_only + b_only
    if discordant == 0:
        p = 1.0
    else:
        tail = sum(math.comb(discordant, i) for i in range(min(a_only, b_only) + 1)) / 2**discordant
        p = min(1.0, 2 * tail)
    diffs = [float(y) - float(x) for x, y in zip(a, b, strict=True)]
    low, high = bootstrap_interval(diffs)
    n = len(a)
    return PairedTest(metric, sum(a) / n, sum(b) / n, sum(diffs) / n, low, high, p, "mcnemar", n, a_only, b_only)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, metric: str, resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = 0) -> PairedTest:
    """The per-task differences b - a resampled over tasks; p: twice the share of resampled means on the far
    side of 0 (two-sided), at least 1 / resamples."""
    if len(a) != len(b) or not a:
        raise ValueError(f"need two equally long, non-empty lists of per-task values, got {len(a)} and {len(b)}")
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    rng = random.Random(seed)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    mean = sum(diffs) / n
    if all(d == 0 for d in diffs):
        p = 1.0
    else:
        below = sum(m <= 0 for m in means) / resamples
        above = sum(m >= 0 for m in means) / resamples
        p = min(1.0, max(2 * min(below, above), 1 / resamples))
    low, high = _percentiles(means, LEVEL)
    return PairedTest(metric, sum(a) / n, sum(b) / n, mean, low, high, p, "paired bootstrap", n)


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_answer(text: str | None, *, numeric: bool) -> str | None:
    """What a final reply answers, for majority votes: its last number (``numeric``) or its normalised text."""
    if not text or not text.strip():
        return None
    if numeric:
        numbers = _NUMBER.findall(text)
        return numbers[-1].replace(",", "") if numbers else None
    return " ".join(text.lower().split())
