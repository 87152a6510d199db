"""Run agents that cannot be touched at all: any command, in any language, one session per task.

The command gets ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` set to its session (every OpenAI
client library reads them), ``AGENTR1_SESSION_ID``, and the task as JSON in ``AGENTR1_TASK`` and
on stdin. A line ``AGENTR1_REWARD=<number>`` on its stdout sets the outcome reward, or pass a
``reward_fn(task, result)``. Exit status 0 finishes the session; anything else, or the timeout,
marks it failed with the reason and the end of stderr (failure kind ``timeout`` or ``agent``,
``agentr1.sdk.failures``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentr1.sdk.client import as_session, create_call, finish_call, request
from agentr1.sdk.failures import tagged_error

_REWARD_LINE = re.compile(r"^AGENTR1_REWARD=\s*(-?[0-9.eE+-]+)\s*$", re.MULTILINE)


@dataclass
class RunResult:
    session_id: str
    exit_code: int | None  # None when killed by the timeout
    stdout: str
    stderr: str
    timed_out: bool
    reward: float | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def run_command(
    command: Sequence[str],
    task: dict[str, Any],
    *,
    timeout_s: float = 600.0,
    task_id: str | None = None,
    group_id: str | None = None,
    run_id: str | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    reward_fn: Callable[[dict[str, Any], RunResult], float | None] | None = None,
    metadata: dict[str, Any] | None = None,
) -> RunResult:
    """Run ``command`` for one task in its own session (``metadata``: more of the session's metadata, e.g. the
    trainer's sample index and an evaluation's sampling override); returns what happened."""
    method, path, _, body = create_call(run_id, task_id or task.get("id"), group_id,
                                        {**(metadata or {}), "runner": list(command)})
    session = as_session(request(method, path, json=body))
    task_json = json.dumps(task)
    child_env = {**os.environ, **(env or {}), "OPENAI_BASE_URL": session.base_url, "OPENAI_API_KEY": session.api_key,
                 "AGENTR1_SESSION_ID": session.id, "AGENTR1_TASK": task_json}
    started = time.monotonic()
    proc = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd, env=child_env, start_new_session=True)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(task_json, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)  # the whole process group: agents spawn helpers
        stdout, stderr = proc.communicate()
    result = RunResult(session_id=session.id, exit_code=None if timed_out else proc.returncode, stdout=stdout,
                       stderr=stderr, timed_out=timed_out, reward=None, seconds=time.monotonic() - started)
    found = _REWARD_LINE.findall(stdout)
    result.reward = reward_fn(task, result) if reward_fn is not None else (float(found[-1]) if found else None)
    if result.ok:
        status, error = "finished", None
    else:
        reason = f"timed out after {timeout_s:.0f} s" if timed_out else f"exit status {proc.returncode}"
        status, error = "failed", tagged_error("timeout" if timed_out else "agent", f"{reason}\n{stderr[-4000:]}")
    method, path, sess, body = finish_call(session, status, result.reward, error)
    request(method, path, sess, json=body)
    return result
