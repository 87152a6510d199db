"""The one-off generator of session 11's outcome-only screens: the demo's tasks with the process reward set to 0
(run with PYTHONPATH at a copy named s11gen.py and ``data.generator=s11gen:outcome_only``)."""

from examples.chains.tasks import make_demo_tasks


def outcome_only(split, n, seed):
    rows = make_demo_tasks(split, n, seed)
    for r in rows:
        r["env_kwargs"]["progress_reward"] = 0.0
    return rows
