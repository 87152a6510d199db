"""The policy being trained: verl's FSDP engine and losses in the trainer's process (:class:`LocalPolicy`, one CPU
or one GPU) or on verl's Ray workers (:mod:`.ray_policy`)."""

from .batches import Rows
from .config import PolicyConfig
from .local import LocalPolicy

__all__ = ["LocalPolicy", "PolicyConfig", "Rows"]
