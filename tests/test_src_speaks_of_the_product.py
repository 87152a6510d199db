"""The product's text speaks of the product: no dates and no issue numbers in ``src/`` (docstrings, comments,
messages). A measured number may stay, with the bench that measured it; when or in which issue it was measured belongs
to the history (git, docs/), not beside the code.

Alembic's migration scripts keep the ``Create Date`` header Alembic writes (metadata of the migration, not prose).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "agentr1"
HISTORY = re.compile(r"20\d{2}-[01]\d-[0-3]\d|\bissues? #?\d+|#\d{2,}\b", re.IGNORECASE)
MIGRATIONS = SRC / "store" / "migrations" / "versions"
ALEMBIC_HEADER = re.compile(r"^Create Date: ")


def history_lines(path: Path) -> list[str]:
    """The lines of ``path`` that carry a date or an issue number."""
    migration = path.is_relative_to(MIGRATIONS)
    return [line.strip() for line in path.read_text().splitlines()
            if HISTORY.search(line) and not (migration and ALEMBIC_HEADER.match(line))]


def test_src_names_no_dates_and_no_issues() -> None:
    found = {str(path.relative_to(SRC)): lines for path in sorted(SRC.rglob("*.py")) if (lines := history_lines(path))}
    assert found == {}, "say what the product does; dates and issue numbers belong to the history"


@pytest.mark.parametrize("line", ["# measured 2026-12-06 on the VM", "(issue 41: the demo)", "see issues 43 and 56",
                                  "fixed in Issue #12", "(#123)"])
def test_the_check_finds_history(tmp_path: Path, line: str) -> None:
    path = tmp_path / "module.py"
    path.write_text(f'"""A module."""\n{line}\nx = 1  # 0.85x the tokens/s, bench/local_engine_bench.py\n')
    assert history_lines(path) == [line]
