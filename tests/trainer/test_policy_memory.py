"""The glibc mmap threshold is pinned before a policy starts training (policy/memory.py)."""

from __future__ import annotations

import subprocess
import sys

CHECK = ("import os; from agentr1.trainer.policy import memory; "
         "print(memory.pin_mmap_threshold(), memory.pin_mmap_threshold())")


def _run(env_extra: dict[str, str]) -> str:
    import os

    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"} | env_extra
    return subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_pinned_once_on_linux_and_a_users_choice_is_kept():
    assert _run({}) == ("True True" if sys.platform.startswith("linux") else "False False")
    assert _run({"MALLOC_MMAP_THRESHOLD_": "65536"}) == "False False"
