"""The supervised fine-tuning job: typed, loadable from YAML, strict like the RL job (unknown keys
are errors), with verl's SFT names where verl has one (``data.train_batch_size``,
``data.micro_batch_size_per_gpu``, ``data.max_token_len_per_gpu``, ``data.max_length``,
``model.path``, ``optim.lr``, ``optim.lr_warmup_steps_ratio``, ``optim.clip_grad``,
``trainer.total_epochs``, ``trainer.total_training_steps``, ``trainer.save_freq``,
``trainer.default_local_dir``).

The data are not files but sessions in a trace store, chosen by ``data`` (see
:mod:`agentr1.trainer.sft.selection`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentr1.trainer.config import DEFAULT_LAYOUT, Layout, TrackingOptions, load_yaml


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SFTData(_Strict):
    """Which stored steps are demonstrations, and how they become rows."""

    db: str  # the trace store (SQLite path / URL, PostgreSQL URL)
    run_ids: list[str] = Field(default_factory=list)  # empty: every run
    statuses: list[str] = Field(default_factory=lambda: ["finished"])
    min_reward: float | None = None  # keep sessions whose outcome reward is >= this
    best_per_group: int = 0  # keep the k sessions with the highest outcome reward per group (0: all)
    group_by: Literal["group", "task"] = "group"  # the group of best_per_group: group_id, or task_id across runs
    text_steps: Literal["skip", "render"] = "skip"  # steps of external models (text, no ids): render them once
    layout: Layout = DEFAULT_LAYOUT
    max_length: int = 4096  # prompt + response tokens of one row
    truncation: Literal["split", "drop", "error"] = "error"
    train_batch_size: int = 8  # rows per optimizer step
    micro_batch_size_per_gpu: int = 0  # rows per forward; 0 = batch by max_token_len_per_gpu
    # tokens per forward; auto: 8,192 on a GPU, on the CPU what the memory available holds
    # (docs/training.md#memory-defaults-that-fit-the-machine)
    max_token_len_per_gpu: int | Literal["auto"] = "auto"
    shuffle: bool = True
    seed: int = 0

    @model_validator(mode="after")
    def _positive(self) -> SFTData:
        if self.train_batch_size < 1:
            raise ValueError("data.train_batch_size must be >= 1")
        if self.best_per_group < 0:
            raise ValueError("data.best_per_group must be >= 0 (0 keeps every session)")
        return self


class SFTModel(_Strict):
    path: str = "smollm2"  # smollm2, tiny or a local HF directory (e.g. an RL or SFT checkpoint's hf/)


class SFTOptim(_Strict):
    lr: float = 1e-5
    weight_decay: float = 0.01
    clip_grad: float = 1.0
    lr_warmup_steps_ratio: float = 0.0
    lr_scheduler_type: Literal["constant", "cosine"] = "constant"
    min_lr_ratio: float | None = None


class SFTTrainerSection(TrackingOptions):
    total_epochs: int = 1
    total_training_steps: int | None = None  # stop earlier than total_epochs allow
    save_freq: int = 0  # 0 = only at the end
    default_local_dir: str = "out/sft"
    device: str = "auto"
    seed: int = 0


class SFTConfig(_Strict):
    run_name: str = "sft"
    data: SFTData
    model: SFTModel = Field(default_factory=SFTModel)
    optim: SFTOptim = Field(default_factory=SFTOptim)
    trainer: SFTTrainerSection = Field(default_factory=SFTTrainerSection)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> SFTConfig:
        return cls.model_validate(load_yaml(path, overrides))

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
