"""Write the GSM8K recipe's Agent-R1 parquet files from the copied JSONL subset in ``data/``.

    python -m examples.gsm8k.prepare            # -> examples/gsm8k/data/{train,test,test_rest}.parquet

``train.yaml`` trains on ``train``, chooses settings on ``test`` (its val files: the first 200 problems of GSM8K's
official test split) and makes claims on ``test_rest`` (its test files: the official test split's other 1,119).

Each row is an Agent-R1 row: ``prompt`` (chat messages), ``agent_name`` ("tool_env"),
``reward_model`` (rule style, the ``#### N`` ground truth, the exact-match scorer), ``env_kwargs``
(the calculator tool, the step limit, sampling), plus ``data_source`` and ``extra_info``.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

from examples.gsm8k.task import CALCULATOR_PATH, SCORER_PATH, ground_truth, messages_for

DATA = Path(__file__).parent / "data"
MAX_STEPS = 3
SAMPLING = {"temperature": 1.0, "max_tokens": 256}


def agent_r1_row(record: dict[str, str], split: str, index: int, *, sampling: dict[str, Any] | None = None,
                 max_steps: int = MAX_STEPS) -> dict[str, Any]:
    """One GSM8K problem (``{"question", "answer"}``) as an Agent-R1 dataset row, with the id ``<split>-<index>``."""
    return {
        "id": f"{split}-{index}",
        "data_source": "openai/gsm8k",
        "prompt": messages_for(record["question"]),
        "agent_name": "tool_env",
        "reward_model": {"style": "rule", "ground_truth": ground_truth(record["answer"]), "scorer": SCORER_PATH},
        "env_kwargs": {"tools": [CALCULATOR_PATH], "max_steps": max_steps, "sampling": dict(sampling or SAMPLING)},
        "extra_info": {"split": split, "index": index, "question": record["question"]},
    }


def read_jsonl(path: Path) -> list[dict[str, str]]:
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


# parquet name: (source file in data/, the split named in the rows, index of the first row in that split)
SOURCES = {"train": ("train.jsonl", "train", 0), "test": ("test.jsonl", "test", 0),
           "test_rest": ("test_rest.jsonl.gz", "test", 200)}


def prepare(out_dir: Path = DATA, *, limit: int | None = None, sampling: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write ``train.parquet``, ``test.parquet`` and ``test_rest.parquet`` (the first ``limit`` problems of each,
    if set)."""
    written = {}
    for name, (source, split, first) in SOURCES.items():
        records = read_jsonl(DATA / source)[:limit]
        rows = [agent_r1_row(r, split, first + i, sampling=sampling) for i, r in enumerate(records)]
        written[name] = write_parquet(rows, out_dir / f"{name}.parquet")
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    for split, path in prepare(args.out, limit=args.limit).items():
        print(f"{split}: {path}")
