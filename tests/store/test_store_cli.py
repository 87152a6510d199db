"""`agentr1 traces`: migrate, runs, sessions, show, export, and readable errors for a bad --db."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from store_workers import make_step
from typer.testing import CliRunner

from agentr1.cli.main import app
from agentr1.store import TraceStore

runner = CliRunner()


def traces(*args: str) -> object:
    return runner.invoke(app, ["traces", *args], catch_exceptions=False)


def _populate(db_url: str) -> tuple[str, str]:
    with TraceStore.open(db_url, migrate=False) as store:
        store.create_run("calc-grpo", run_id="run-cli")
        done = store.create_session(run_id="run-cli", task_id="task-7", group_id="grp-1")
        store.append_steps([
            make_step(done, 0, action={"content": "let me compute", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{\"e\": \"12*7\"}"}}]},
                feedback_messages=[{"role": "tool", "tool_call_id": "c1", "content": "84"}]),
            make_step(done, 1, action={"content": "84"}, drift=True, policy_version=2),
        ])
        store.add_reward(done, 0.5, step=1)
        store.finish_session(done, reward=1.0)
        running = store.create_session(run_id="run-cli", task_id="task-8")
    return done, running


def test_migrate_then_use(empty_db_url: str) -> None:
    result = traces("runs", "--db", empty_db_url)
    assert result.exit_code == 2
    assert "agentr1 traces migrate" in result.stderr and "schema empty" in result.stderr

    result = traces("migrate", "--db", empty_db_url)
    assert result.exit_code == 0, result.output
    assert "schema up to date" in result.stdout
    assert traces("migrate", "--db", empty_db_url).exit_code == 0  # idempotent
    TraceStore.open(empty_db_url, migrate=False).close()


def test_runs_and_sessions(db_url: str) -> None:
    done, running = _populate(db_url)
    result = traces("runs", "--db", db_url)
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split()[:5] == ["run", "name", "sessions", "steps", "reward"]
    assert row.split()[:5] == ["run-cli", "calc-grpo", "2", "2", "1.000"]

    result = traces("sessions", "--db", db_url, "--run", "run-cli")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()[1:]
    assert [line.split()[:6] for line in lines] == [
        [done, "finished", "task-7", "grp-1", "2", "1.000"], [running, "running", "task-8", "-", "0", "-"],
    ]
    result = traces("sessions", "--db", db_url, "--status", "running")
    assert [line.split()[0] for line in result.stdout.splitlines()[1:]] == [running]


def test_show(db_url: str) -> None:
    done, _ = _populate(db_url)
    result = traces("show", done, "--db", db_url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"session {done}" in out and "status=finished" in out and "reward=1.000" in out
    assert "-- step 0  policy v0  8 obs / 4 action tokens  finish=stop" in out
    assert "-- step 1  policy v2" in out and "reward=0.500 DRIFT" in out
    assert "action: 'let me compute'" in out and '"name": "calc"' in out
    assert 'feedback: [{"role": "tool"' in out

    result = traces("show", done, "--db", db_url, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    with TraceStore.open(db_url, migrate=False) as store:
        want = json.loads(json.dumps(store.get_session(done).to_dict(), default=str))
    assert data == want
    assert data["steps"][1]["reward"] == 0.5
    assert data["steps"][0]["observation_ids"] == make_step(done, 0).observation_ids

    result = traces("show", "no-such-session", "--db", db_url)
    assert result.exit_code == 1 and "no session with id 'no-such-session'" in result.stderr


def test_export(db_url: str, tmp_path: Path) -> None:
    done, running = _populate(db_url)
    out = tmp_path / "t.jsonl"
    result = traces("export", str(out), "--db", db_url, "--run", "run-cli")
    assert result.exit_code == 0, result.output
    assert f"wrote 2 sessions to {out}" in result.stdout
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == sorted([done, running])

    pq_out = tmp_path / "t.out"
    result = traces("export", str(pq_out), "--db", db_url, "--format", "parquet")
    assert result.exit_code == 0, result.output
    import pyarrow.parquet as pq

    assert pq.read_table(pq_out).num_rows == 2

    result = runner.invoke(app, ["traces", "export", str(tmp_path / "t.csv"), "--db", db_url])
    assert result.exit_code == 2 and "unknown export format 'csv'" in result.output


@pytest.mark.parametrize(
    ("db", "message"),
    [
        ("{tmp}/missing/dir/traces.db", "folder {tmp}/missing/dir does not exist"),
        ("mysql://u@h/db", "unsupported database 'mysql'"),
        ("postgresql://u@h:port/db", "cannot parse database URL"),
        ("postgresql://postgres:pw@127.0.0.1:1/x", "cannot connect to 'postgresql+psycopg://postgres:***@127.0.0.1:1/x'"),
    ],
    ids=["sqlite-missing-folder", "unsupported", "malformed", "unreachable-postgres"],
)
def test_bad_db(tmp_path: Path, db: str, message: str) -> None:
    for command in (["runs"], ["migrate"], ["sessions"], ["show", "x"], ["export", str(tmp_path / "o.jsonl")]):
        result = traces(*command, "--db", db.format(tmp=tmp_path))
        assert result.exit_code == 2, (command, result.output)
        assert result.stderr.startswith("error: ") and message.format(tmp=tmp_path) in result.stderr, command
        assert "Traceback" not in result.output


def test_console_script_bad_db(tmp_path: Path) -> None:
    """The installed entry point, as a user runs it: a one-line error, exit code 2, no traceback."""
    script = Path(sys.executable).with_name("agentr1")
    assert script.is_file(), f"the agentr1 console script is not installed next to {sys.executable}"
    env = {**os.environ, "AGENTR1_DB": f"sqlite:///{tmp_path}/nope/traces.db"}  # --db from the environment
    proc = subprocess.run([str(script), "traces", "runs"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"error: cannot open SQLite database '{tmp_path}/nope/traces.db'" in proc.stderr
    assert "Traceback" not in proc.stderr
