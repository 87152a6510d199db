"""The agent side installs light: a wheel of the project in a fresh venv pulls only the base
dependencies (httpx, pydantic, typer), and `import agentr1.sdk` loads neither torch nor SQLAlchemy; `agentr1 --help` works there."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "sqlalchemy", "transformers", "fastapi", "numpy")


def _run(*command: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.slow
def test_sdk_wheel_installs_and_imports_without_torch_or_sqlalchemy(tmp_path):
    # the build backend (hatchling) comes from the project's dev environment: no isolated build env
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist", ROOT)
    (wheel,) = (tmp_path / "dist").glob("agentr1-*.whl")
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel)
    freeze = _run(python, "-m", "pip", "list", "--format=freeze").splitlines()
    installed = {line.split("==")[0].lower() for line in freeze}
    assert {"agentr1", "httpx", "pydantic", "typer"} <= installed
    assert not installed & set(HEAVY), installed & set(HEAVY)
    check = ("import sys, agentr1.sdk, agentr1.sdk.propagation; from agentr1.sdk import rollout, session, reward, "
             f"run_command; heavy = [m for m in {HEAVY!r} if m in sys.modules]; assert not heavy, heavy; print('ok')")
    assert _run(python, "-c", check, cwd=tmp_path).strip() == "ok"  # cwd: not the source tree
    # the command's shell works on the base install too (its callback sets glibc's malloc options via agentr1.core)
    assert "Usage" in _run(tmp_path / "venv" / "bin" / "agentr1", "--help", cwd=tmp_path)
