"""The embedded engine: a HF transformers model on CPU or one GPU serving token ids with continuous batching, a
slot KV cache with prefix reuse, batched sampling, grammar masks and CUDA graphs, in this process or in a process
of its own.

A part below the gateway, a peer of the SGLang and vLLM servers: the gateway's ``local`` backend
(``agentr1.gateway.backends.LocalBackend``) is its adapter, as its SGLang and vLLM backends are those servers'
clients. It speaks the generation vocabulary of :mod:`agentr1.core.generation` (``GenerateRequest``,
``GenerateResult``, ...) and imports nothing of the gateway. :class:`EngineOptions` is how it runs, one object from
the settings to the engine (and to the engine's own process). Names are imported on first use: importing this
package does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentr1.core import lazy_exports

from .options import EngineOptions

if TYPE_CHECKING:
    from .engine import Engine
    from .grammar import build_grammar, to_ebnf
    from .process import EngineAddress
    from .requests import check_request
    from .rows import EngineStats, Row, Sink
    from .weights import read_safetensors

_MODULES = {"Engine": "engine", "EngineAddress": "process", "EngineStats": "rows", "Row": "rows", "Sink": "rows",
            "build_grammar": "grammar", "check_request": "requests", "read_safetensors": "weights", "to_ebnf": "grammar"}
__all__ = [
    "Engine",
    "EngineAddress",
    "EngineOptions",
    "EngineStats",
    "Row",
    "Sink",
    "build_grammar",
    "check_request",
    "read_safetensors",
    "to_ebnf",
]
__getattr__ = lazy_exports(__name__, _MODULES)
