"""Write the GSM8K recipe's Agent-R1 parquet files from the copied JSONL subset in ``data/``.

    python -m examples.gsm8k.prepare            # -> examples/gsm8k/data/{train,test}.parquet

Each row is an Agent-R1 row: ``prompt`` (chat messages), ``agent_name`` ("tool_env"),
``reward_model`` (rule style, the ``#### N`` ground truth, the exact-match scorer), ``env_kwargs``
(the calculator tool, the step limit, sampling), plus ``data_source`` and ``extra_info``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from examples.gsm8k.task import CALCULATOR_PATH, SCORER_PATH, ground_truth, messages_for

DATA = Path(__file__).parent / "data"
MAX_STEPS = 3
SAMPLING = {"temperature": 1.0, "max_tokens": 256}


def agent_r1_row(record: dict[str, str], split: str, index: int, *, sampling: dict[str, Any] | None = None,
                 max_steps: int = MAX_STEPS) -> dict[str, Any]:
    """One GSM8K problem (``{"question", "answer"}``) as an Agent-R1 dataset row."""
    return {
        "data_source": "openai/gsm8k",
        "prompt": messages_for(record["question"]),
        "agent_name": "tool_env",
        "reward_model": {"style": "rule", "ground_truth": ground_truth(record["answer"]), "scorer": SCORER_PATH},
        "env_kwargs": {"tools": [CALCULATOR_PATH], "max_steps": max_steps, "sampling": dict(sampling or SAMPLING)},
        "extra_info": {"split": split, "index": index, "question": record["question"]},
    }


def read_jsonl(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def prepare(out_dir: Path = DATA, *, limit: int | None = None, sampling: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write ``train.parquet`` and ``test.parquet`` (the first ``limit`` problems of each, if set)."""
    written = {}
    for split in ("train", "test"):
        records = read_jsonl(DATA / f"{split}.jsonl")[:limit]
        rows = [agent_r1_row(r, split, i, sampling=sampling) for i, r in enumerate(records)]
        written[split] = write_parquet(rows, out_dir / f"{split}.parquet")
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    for split, path in prepare(args.out, limit=args.limit).items():
        print(f"{split}: {path}")
