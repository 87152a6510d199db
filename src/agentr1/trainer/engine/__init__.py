"""The policy-update engine: verl's FSDP engine and losses, in this process, on one CPU or one GPU."""

from .batch import PaddedBatch, pad_rows
from .config import PolicyEngineConfig
from .policy import LocalPolicyEngine

__all__ = ["LocalPolicyEngine", "PaddedBatch", "PolicyEngineConfig", "pad_rows"]
