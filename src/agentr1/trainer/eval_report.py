"""What ``agentr1 eval`` prints: the protocol's metrics of one evaluation as a table, and two policies evaluated
on the same tasks side by side with paired tests (``agentr1 eval --compare A B``).

Both evaluations' answers (:func:`agentr1.trainer.evaluate.evaluate_checkpoint`) carry each task's outcomes;
the comparison pairs them by task id: McNemar's exact test on greedy success, a paired bootstrap on the
per-task mean@K and pass@K. "B beats A" then comes with its p-value, not two numbers of two draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentr1.trainer.eval_metrics import PairedTest, mcnemar_exact, paired_bootstrap, pass_at_k

__all__ = ["compare_evaluations", "comparison_table", "metrics_table"]


def _by_task(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(t["task_id"]): t for t in answer.get("tasks_detail", [])}


def compare_evaluations(a: dict[str, Any], b: dict[str, Any]) -> list[PairedTest]:
    """Paired tests of B against A over the tasks both evaluated (greedy@1 where both ran greedily; mean@K and
    pass@K where both sampled, K the fewest samples any task has in either)."""
    ta, tb = _by_task(a), _by_task(b)
    common = sorted(set(ta) & set(tb))
    if not common:
        raise ValueError("the two evaluations share no task: compare them on the same tasks (the same job)")
    tests: list[PairedTest] = []
    greedy = [t for t in common if ta[t]["greedy"] is not None and tb[t]["greedy"] is not None]
    if greedy:
        tests.append(mcnemar_exact([bool(ta[t]["greedy"]) for t in greedy], [bool(tb[t]["greedy"]) for t in greedy]))
    sampled = [t for t in common if ta[t]["samples"] and tb[t]["samples"]]
    if sampled:
        k = min(min(len(ta[t]["samples"]), len(tb[t]["samples"])) for t in sampled)

        def mean_at(detail: dict[str, Any]) -> float:
            return sum(detail["samples"]) / len(detail["samples"])

        def pass_at(detail: dict[str, Any]) -> float:
            return pass_at_k(len(detail["samples"]), sum(detail["samples"]), k)

        for name, per_task in ((f"mean@{k}", mean_at), (f"pass@{k}", pass_at)):
            tests.append(paired_bootstrap([per_task(ta[t]) for t in sampled], [per_task(tb[t]) for t in sampled],
                                          metric=name))
    return tests


def comparison_table(tests: Sequence[PairedTest], *, a_name: str, b_name: str) -> str:
    """A plain-text table: metric, A, B, B - A with its 95% interval, p-value, test, tasks."""
    header = ("metric", a_name, b_name, "B - A [95% CI]", "p", "test", "tasks")
    rows: list[tuple[str, ...]] = [header]
    for t in tests:
        discordant = f" ({t.a_only} A only, {t.b_only} B only)" if t.method == "mcnemar" else ""
        rows.append((t.metric, f"{t.a:.3f}", f"{t.b:.3f}", f"{t.diff:+.3f} [{t.ci_low:+.3f}, {t.ci_high:+.3f}]",
                     f"{t.p_value:.3g}", t.method + discordant, str(t.tasks)))
    return _aligned(rows)


def metrics_table(answer: dict[str, Any]) -> str:
    """One evaluation's protocol metrics (``val-core/<source>/acc/<metric>``): metric, value, 95% interval."""
    rows: list[tuple[str, ...]] = [("metric", "value", "95% CI")]
    for key, value in answer.items():
        if not key.startswith("val-core/") or key.endswith(("/ci_low", "/ci_high", "/n_tasks", "/n_samples")):
            continue
        low, high = answer.get(f"{key}/ci_low"), answer.get(f"{key}/ci_high")
        interval = f"[{low:.3f}, {high:.3f}]" if low is not None and high is not None else ""
        rows.append((key.removeprefix("val-core/"), f"{value:.3f}", interval))
    return _aligned(rows)


def _aligned(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)
