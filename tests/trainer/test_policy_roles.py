"""The policy is split by role: :class:`LocalPolicy` (``policy/local.py``) composes the actor's updates, the reference,
the critic, the weight sync and the checkpoints, each in a module of its own, and :class:`RayPolicy` composes the same
roles over models on Ray workers. The structural checks read the source (no model is built); the weight sync runs on
fake tensors and backends."""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path

import pytest
import torch

from agentr1.trainer.policy.weight_sync import WeightSync

POLICY = Path(__file__).resolve().parents[2] / "src" / "agentr1" / "trainer" / "policy"
MAX_LOCAL_LINES = 260  # the composition; the roles' code lives in their modules

# what each role calls into, found only in that role's module
ROLE_NAMES = {
    "actor.py": {"ppo_loss", "sft_loss", "compute_rollout_correction_and_rejection_mask"},
    "critic.py": {"value_loss", "FSDPCriticConfig"},
    "reference.py": {"kl_penalty"},
    "weight_sync.py": {"update_weights_from_tensors", "update_weights", "save_hf_directory"},
    "checkpoint.py": {"STATE_FILE", "OLD_STATE_FILE"},
    "updates.py": {"split_rows", "release_freed_memory"},
}


def _names(path: Path) -> set[str]:
    """Every identifier and attribute name the module's code uses (not its strings or docstrings)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.add(node.asname or node.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
    return found


def _methods(path: Path, cls: str) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text())
    [node] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    return {f.name: f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_local_policy_is_a_thin_composition():
    lines = len((POLICY / "local.py").read_text().splitlines())
    assert lines <= MAX_LOCAL_LINES, f"policy/local.py has {lines} lines: a role's code belongs in its own module"
    for name, method in _methods(POLICY / "local.py", "LocalPolicy").items():
        if name not in ("__init__", "_compose"):  # each public method hands the call to a role
            assert len(method.body) <= 4, f"LocalPolicy.{name} has {len(method.body)} statements: move it to a role"


@pytest.mark.parametrize("module", sorted(ROLE_NAMES))
def test_each_roles_code_lives_in_its_module(module: str):
    assert ROLE_NAMES[module] <= _names(POLICY / module)
    for other in (POLICY / "local.py", POLICY / "ray_policy.py"):
        leaked = ROLE_NAMES[module] & _names(other)
        assert not leaked, f"{other.name} uses {sorted(leaked)}: that is {module}'s role"


def test_the_ray_policy_reuses_the_roles_and_only_builds_its_models():
    assert set(_methods(POLICY / "ray_policy.py", "RayPolicy")) == {"__init__"}


class FakeActor:
    def __init__(self) -> None:
        self.weight = torch.arange(6, dtype=torch.float32).reshape(2, 3)

    def named_tensors(self):
        yield "w", self.weight


class InMemory:
    weights_in_memory = True

    def __init__(self) -> None:
        self.received: dict[str, torch.Tensor] = {}

    async def update_weights_from_tensors(self, tensors: dict[str, torch.Tensor]) -> int:
        self.received = tensors
        return 7


class FromDirectory:
    weights_in_memory = False

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def update_weights(self, path: str) -> int:
        self.paths.append(path)
        return len(self.paths)


def test_weights_go_in_memory_to_a_backend_that_declares_it(tmp_path: Path):
    actor, backend = FakeActor(), InMemory()
    sync = WeightSync(actor, tmp_path, tmp_path / "weights")  # type: ignore[arg-type]
    assert asyncio.run(sync.sync_to(backend, version=3)) == 7
    assert backend.received["w"] is actor.weight  # the live tensor, no copy
    assert not (tmp_path / "weights").exists()
    assert sync.state_dict()["w"] is not actor.weight  # a copy unless asked otherwise


def test_weights_reach_any_other_backend_as_the_latest_directory_only(tmp_path: Path):
    source = tmp_path / "model"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"model_type": "llama"}))
    backend = FromDirectory()
    sync = WeightSync(FakeActor(), source, tmp_path / "weights")  # type: ignore[arg-type]
    assert asyncio.run(sync.sync_to(backend, version=1)) == 1
    assert asyncio.run(sync.sync_to(backend, version=2)) == 2
    assert [Path(p).name for p in backend.paths] == ["policy-1", "policy-2"]
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["policy-2"]  # a missed update: load the next
    assert (tmp_path / "weights" / "policy-2" / "config.json").is_file()


def test_a_backend_that_does_not_declare_how_it_takes_weights_is_refused(tmp_path: Path):
    class Undeclared:
        async def update_weights(self, path: str) -> int:
            return 1

    with pytest.raises(AttributeError, match="weights_in_memory"):
        asyncio.run(WeightSync(FakeActor(), tmp_path, tmp_path / "w").sync_to(Undeclared(), version=1))  # type: ignore[arg-type]
