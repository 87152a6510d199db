"""Supervised fine-tuning on stored sessions (warm start before RL); see docs/sft.md."""

from agentr1.trainer.sft.config import SFTConfig, SFTData
from agentr1.trainer.sft.data import SFTRows, build_sft_rows
from agentr1.trainer.sft.selection import Selection, select_demonstrations
from agentr1.trainer.sft.trainer import SFTTrainer

__all__ = ["SFTConfig", "SFTData", "SFTRows", "SFTTrainer", "Selection", "build_sft_rows", "select_demonstrations"]
