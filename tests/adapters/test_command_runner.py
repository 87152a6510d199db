"""Agents run as commands: agentr1.sdk.run_command, agentr1.adapters.command.run_tasks and the
subprocess example, against a real gateway."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time

from adapter_checks import exact_steps, load_example, new_run, run_sessions

from agentr1.adapters.command import python, run_tasks
from agentr1.sdk import run_command

# A child that needs no imports beyond the standard library: starts in milliseconds.
ECHO_ENV = textwrap.dedent("""
    import json, os, sys
    task = json.loads(os.environ["AGENTR1_TASK"])
    assert json.loads(sys.stdin.read()) == task
    print(json.dumps({k: os.environ[k] for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "AGENTR1_SESSION_ID")}))
    print("AGENTR1_REWARD=" + str(task.get("reward", 0.5)))
""")


def test_success_with_reward_line_finishes_the_session_with_that_reward(gateway):
    _, store = gateway
    run_id = new_run()
    result = run_command([sys.executable, "-c", ECHO_ENV], {"id": "t-ok", "q": 1}, run_id=run_id, group_id="g")
    assert result.ok and result.exit_code == 0 and result.reward == 0.5 and not result.timed_out
    seen = json.loads(result.stdout.splitlines()[0])
    assert seen["AGENTR1_SESSION_ID"] == result.session_id
    assert seen["OPENAI_BASE_URL"].endswith(f"/sessions/{result.session_id}/v1")
    assert seen["OPENAI_API_KEY"].startswith("a1s-")
    record = store.get_session(result.session_id)
    assert (record.status, record.reward, record.task_id, record.group_id, record.run_id) == \
        ("finished", 0.5, "t-ok", "g", run_id)


def test_nonzero_exit_fails_the_session_with_stderr_in_the_error(gateway):
    _, store = gateway
    script = "import sys; print('partial work'); sys.stderr.write('Traceback: tool exploded\\n'); sys.exit(3)"
    result = run_command([sys.executable, "-c", script], {"id": "t-crash"})
    assert not result.ok and result.exit_code == 3 and result.reward is None
    record = store.get_session(result.session_id)
    assert record.status == "failed"
    assert "exit status 3" in record.error and "tool exploded" in record.error


def test_timeout_kills_the_whole_process_group_and_fails_the_session(gateway, tmp_path):
    _, store = gateway
    pid_file = tmp_path / "helper.pid"
    # the agent starts a helper of its own and waits: both must die at the timeout
    command = ["sh", "-c", f"sleep 120 & echo $! > {pid_file}; echo started >&2; wait"]
    started = time.monotonic()
    result = run_command(command, {"id": "t-slow"}, timeout_s=1.0)
    assert time.monotonic() - started < 10
    assert result.timed_out and result.exit_code is None and not result.ok
    record = store.get_session(result.session_id)
    assert record.status == "failed" and "timed out after 1 s" in record.error and "started" in record.error
    helper = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(helper), "the agent's helper process survived the timeout"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, only not yet reaped
    except FileNotFoundError:
        return False


def test_run_tasks_runs_samples_per_task_as_groups(gateway):
    _, store = gateway
    run_id = new_run()
    tasks = [{"id": "a", "reward": 1.0}, {"id": "b", "reward": 0.0}]
    results = run_tasks([sys.executable, "-c", ECHO_ENV], tasks, samples=2, workers=3, run_id=run_id)
    assert [r.reward for r in results] == [1.0, 1.0, 0.0, 0.0] and all(r.ok for r in results)
    sessions = run_sessions(store, run_id)
    assert sorted((s.task_id, s.group_id, s.reward) for s in sessions) == [
        ("a", "a", 1.0), ("a", "a", 1.0), ("b", "b", 0.0), ("b", "b", 0.0)]
    assert python("agent.py", "--x") == [sys.executable, "agent.py", "--x"]


def test_subprocess_example_plain_openai_script_records_exact_steps(gateway, monkeypatch):
    url, store = gateway
    monkeypatch.delenv("AGENTR1_TASK", raising=False)
    monkeypatch.setitem(os.environ, "HF_HUB_OFFLINE", "1")
    run_id = new_run()
    results = load_example("subprocess_agent").main([url, "--limit", "1", "--run-id", run_id])
    (result,) = results.values()
    assert result.ok and result.reward == 1.0, result.stderr
    (record,) = run_sessions(store, run_id)
    assert record.id == result.session_id and record.status == "finished" and record.reward == 1.0
    exact_steps(store, record.id, 2)
