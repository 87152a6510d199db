"""The trainer's state is declared in one place: ``Trainer.__init__`` sets the job's settings, ``Trainer.setup`` builds
every part of the run into one :class:`RunState` (``trainer.run``), and a trainer used before setup says so."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
from pathlib import Path

import pytest

from agentr1.trainer.config import JobConfig
from agentr1.trainer.loop import Trainer
from agentr1.trainer.run_state import RunState, TrainerNotSetUp

TRAINER = Path(__file__).resolve().parents[2] / "src" / "agentr1" / "trainer"
LOOP = TRAINER / "loop.py"
INIT_ATTRIBUTES = {"config", "quiet", "out_dir", "_run"}


def _config(tmp_path: Path, model: Path) -> JobConfig:
    return JobConfig.model_validate({
        "run_name": "state", "db": f"sqlite:///{tmp_path / 'traces.db'}",
        "agent": {"entrypoint": "e2e_agent:solve"},
        "data": {"generator": "e2e_agent:make_tasks", "train_size": 4, "val_size": 2},
        "actor_rollout_ref": {"model": str(model)},
        "trainer": {"default_local_dir": str(tmp_path / "out"), "device": "cpu"},
    })


def test_a_trainer_used_before_setup_says_so(tmp_path: Path):
    trainer = Trainer(_config(tmp_path, tmp_path / "no-model"), quiet=True)
    calls = {"run": lambda: trainer.run, "train": trainer.train, "close": trainer.close,
             "evaluate": lambda: asyncio.run(trainer.evaluate())}
    for name, call in calls.items():
        with pytest.raises(TrainerNotSetUp, match=r"not set up: call trainer\.setup\(\)"):
            call()
        assert not (tmp_path / "out").exists(), name  # nothing was started


def _self_assignments(tree: ast.AST, cls: str = "Trainer") -> dict[str, set[str]]:
    """For each method of class ``cls``, the attributes of ``self`` it assigns."""
    [trainer] = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls]
    out: dict[str, set[str]] = {}
    for method in trainer.body:
        if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        targets: list[ast.expr] = []
        for node in ast.walk(method):
            if isinstance(node, ast.Assign):
                targets += node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets.append(node.target)
        names = set()
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                    names.add(sub.attr)
        out[method.name] = names
    return out


def test_the_trainer_sets_its_attributes_in_init_and_setup_only_its_run_state():
    assigned = _self_assignments(ast.parse(LOOP.read_text()))
    assert assigned.pop("__init__") == INIT_ATTRIBUTES
    assert assigned.pop("setup") == {"_run"}
    assert {name: names for name, names in assigned.items() if names} == {}, "state outside RunState"


def test_setup_sets_every_field_the_run_state_declares(tmp_path: Path, tiny_model_path: Path):
    trainer = Trainer(_config(tmp_path, tiny_model_path), quiet=True)
    trainer.setup()
    try:
        assert set(vars(trainer)) == INIT_ATTRIBUTES
        run = trainer.run
        assert isinstance(run, RunState)
        for field in dataclasses.fields(RunState):
            value = getattr(run, field.name)
            optional = "None" in str(field.type)
            assert optional or value is not None, f"setup left RunState.{field.name} unset"
        assert run.runner is not None and run.serving is not None  # online: this job rolls out
        assert run.distiller is None and len(run.val_tasks) == 2 and len(run.train_tasks) == 4
        with pytest.raises(RuntimeError, match="set up already"):
            trainer.setup()
    finally:
        trainer.close()


def test_the_sft_trainer_keeps_its_run_in_one_place_too(tmp_path: Path):
    from agentr1.trainer.sft import SFTConfig, SFTTrainer

    assigned = _self_assignments(ast.parse((TRAINER / "sft" / "trainer.py").read_text()), "SFTTrainer")
    assert assigned.pop("__init__") == {"config", "quiet", "out_dir", "checkpoint", "_run"}
    assert assigned.pop("setup") == {"_run"}
    assert {name: names for name, names in assigned.items() if names} == {"train": {"checkpoint"}}  # its output
    trainer = SFTTrainer(SFTConfig.model_validate({"model": {"path": str(tmp_path / "no-model")},
                                                   "data": {"db": f"sqlite:///{tmp_path / 'x.db'}"},
                                                   "trainer": {"default_local_dir": str(tmp_path / "out")}}))
    for call in (trainer.train, trainer.close, lambda: trainer.run):
        with pytest.raises(TrainerNotSetUp, match="not set up"):
            call()
