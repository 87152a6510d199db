"""Checkpoints: `<out>/checkpoints/step_<k>/` holds a servable HF directory (`hf/`), the policy's
resumable state (`policy/`: weights, optimizer, schedule) and the trainer's state (`trainer_state.json`:
step, task position, run id, policy version). A checkpoint directory appears only when complete
(written under a temporary name, then renamed), so an interrupted save never looks resumable.

Resuming never trains twice on the same sessions: online, each step rolls out new sessions and the
task position is in the state; offline, the state holds the cursor over the selection and the time the
selection was first made (``offline_as_of``), so sessions that reach the store later cannot shift it."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentr1.core import release_freed_memory

STATE_FILE = "trainer_state.json"
CHECKPOINT_NAME = re.compile(r"step_(\d+)")  # not step_<k>.partial: a save that was interrupted


@dataclass
class TrainerState:
    run_id: str
    step: int = 0
    sampler_position: int = 0
    policy_version: int = 0
    offline_cursor: int = 0  # groups of the offline selection already trained on
    offline_as_of: str | None = None  # ISO time of the offline selection: what finished later is not in it

    @classmethod
    def load(cls, checkpoint: Path) -> TrainerState:
        return cls(**json.loads((checkpoint / STATE_FILE).read_text()))


def checkpoints_dir(out_dir: Path) -> Path:
    return out_dir / "checkpoints"


def latest_checkpoint(out_dir: Path) -> Path | None:
    done = {int(m.group(1)): p for p in checkpoints_dir(out_dir).glob("step_*")
            if (m := CHECKPOINT_NAME.fullmatch(p.name)) and (p / STATE_FILE).exists()}
    return done[max(done)] if done else None


def save_checkpoint(out_dir: Path, policy: Any, state: TrainerState) -> Path:
    final = checkpoints_dir(out_dir) / f"step_{state.step}"
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    policy.save(partial / "hf")
    policy.save_checkpoint(partial / "policy")
    (partial / STATE_FILE).write_text(json.dumps(asdict(state), indent=2))
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    release_freed_memory(keep_bytes=0)  # what saving freed would sit beside the next rollout (agentr1.core.allocator)
    return final
