"""A session's sampling override: how every call of the session is decoded, whatever the agent asks.

An evaluation must decide the decoding, not the agent: greedy pass@1 needs temperature 0 on every call, and
the K samples of mean@K / pass@K must be independent draws. Agents choose their own sampling (a row's
``sampling``, a framework's default), so the gateway applies the evaluation's choice: a session opened with
``metadata["sampling"] = {"temperature": 0}`` is decoded greedily on every call. Keys:

- ``temperature`` (>= 0; 0 = greedy) and ``top_p`` (0 < p <= 1) replace the call's own.
- ``seed_offset`` is added to a seed the call carries (a seeded agent's episode is reproducible; its k-th sample
  of a task gets ``seed_offset = k * stride`` so the K samples differ while each stays reproducible). Calls
  without a seed stay unseeded.

The step stores the sampling parameters the model was decoded with (after the override), and the session's
metadata keeps the override itself, so the trace says what happened.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentr1.core.generation import SamplingParams
from agentr1.gateway.errors import APIError

__all__ = ["METADATA_KEY", "SamplingOverride", "sampling_override"]

METADATA_KEY = "sampling"


class SamplingOverride(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float | None = Field(None, ge=0.0, le=100.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed_offset: int = Field(0, ge=0, le=2**62)

    def apply(self, sampling: SamplingParams) -> SamplingParams:
        """``sampling`` with the override applied (a copy; the input is left as it was)."""
        out = sampling.copy()
        if self.temperature is not None:
            out.temperature = self.temperature
        if self.top_p is not None:
            out.top_p = self.top_p
        if out.seed is not None and self.seed_offset:
            out.seed = (out.seed + self.seed_offset) % 2**63
        return out


def sampling_override(metadata: dict[str, Any] | None) -> SamplingOverride | None:
    """The override a session's metadata asks for, None without one; a 400 naming ``metadata.sampling`` when it
    is not a valid override."""
    if not metadata or metadata.get(METADATA_KEY) is None:
        return None
    try:
        return SamplingOverride.model_validate(metadata[METADATA_KEY])
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise APIError(400, f"invalid sampling override{f' ({where})' if where else ''}: {first.get('msg')}",
                       code="invalid_request", param=f"metadata.{METADATA_KEY}") from exc
