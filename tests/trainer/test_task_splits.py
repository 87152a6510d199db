"""The task loader's three splits: train, val and test from files or a generator, with their own sizes and seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentr1.trainer.config import DataConfig
from agentr1.trainer.tasks import SPLIT_SEED_OFFSETS, load_tasks

CALLS: list[tuple[str, int, int]] = []


def recording_generator(split: str, n: int, seed: int) -> list[dict]:
    CALLS.append((split, n, seed))
    return [{"id": f"{split}-{i}", "question": f"{split} {seed} {i}"} for i in range(n)]


def test_a_generator_is_asked_for_each_split_with_its_size_and_seed():
    CALLS.clear()
    config = DataConfig(generator=f"{__name__}:recording_generator", train_size=5, val_size=3, seed=7)
    assert [len(load_tasks(config, split)) for split in ("train", "val", "test")] == [5, 3, 3]
    assert CALLS == [("train", 5, 7), ("val", 3, 7 + 1_000_003), ("test", 3, 7 + 2_000_006)]
    assert len(set(SPLIT_SEED_OFFSETS.values())) == 3  # no two splits draw from one seed
    sized = DataConfig(generator=f"{__name__}:recording_generator", val_size=3, test_size=9)
    assert len(load_tasks(sized, "test")) == 9


def test_each_split_reads_its_own_files(tmp_path: Path):
    paths = {}
    for split in ("train", "val", "test"):
        paths[split] = tmp_path / f"{split}.jsonl"
        paths[split].write_text("\n".join(json.dumps({"question": f"{split} {i}"}) for i in range(2)))
    config = DataConfig(train_files=[str(paths["train"])], val_files=[str(paths["val"])],
                        test_files=[str(paths["test"])])
    assert [t["question"] for t in load_tasks(config, "test")] == ["test 0", "test 1"]
    assert [t["question"] for t in load_tasks(config, "val")] == ["val 0", "val 1"]


def test_a_missing_or_unknown_split_is_named():
    only_val = DataConfig(train_files=["t.jsonl"], val_files=["v.jsonl"])
    with pytest.raises(ValueError, match=r"no test tasks: set data\.test_files or data\.generator"):
        load_tasks(only_val, "test")
    with pytest.raises(ValueError, match="split must be one of"):
        load_tasks(only_val, "dev")


@pytest.mark.parametrize("split", ["val", "test"])
def test_the_trainers_evaluations_run_on_the_split_it_is_told(tmp_path: Path, tiny_model_path: Path, split: str):
    """trainer.eval_split: the tasks of the trainer's own evaluations (before, every test_freq steps, after) come from
    val by default, from test for a run whose before -> after is the claim (scripts/demo)."""
    from agentr1.trainer import Trainer
    from agentr1.trainer.config import JobConfig

    config = JobConfig.model_validate({
        "run_name": "splits", "db": f"sqlite:///{tmp_path / 'traces.db'}",
        "agent": {"entrypoint": "e2e_agent:solve"},
        "data": {"generator": f"{__name__}:recording_generator", "train_size": 4, "val_size": 3, "test_size": 2},
        "actor_rollout_ref": {"model": str(tiny_model_path)},
        "trainer": {"default_local_dir": str(tmp_path / "out"), "device": "cpu", "eval_split": split},
    })
    trainer = Trainer(config, quiet=True)
    trainer.setup()
    try:
        assert [t["id"] for t in trainer.run.val_tasks] == [f"{split}-{i}" for i in range({"val": 3, "test": 2}[split])]
    finally:
        trainer.close()
