"""CUDA graphs of the local engine's decode step, one per (rows, attended length) bucket.

A decode step of a small model is hundreds of short kernels; launched one by one from Python they
cost far more than they compute. Every decode step reads its inputs from the same device buffers
(token ids, positions) and writes the key/value cache in place, so its kernels can be captured once
per shape and replayed: the engine pads a step's rows to the next bucket of :data:`ROW_BUCKETS`
(pad rows write to the cache's scratch column only) and its attended length to a multiple of
:data:`LENGTH_STEP`; a shape not captured yet runs in a wider graph of the same length if there is one. Weights updated in place (the trainer's sync) are seen by the graphs as they
are; a reallocated cache invalidates them (:meth:`DecodeGraphs.clear`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

__all__ = ["LENGTH_STEP", "ROW_BUCKETS", "DecodeGraphs", "row_bucket"]

log = logging.getLogger(__name__)

ROW_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512)
LENGTH_STEP = 128


def row_bucket(rows: int, limit: int) -> int:
    """The smallest bucket holding ``rows`` rows (at most ``limit``)."""
    for size in ROW_BUCKETS:
        if size >= rows:
            return min(size, limit)
    return limit


class DecodeGraphs:
    """Captured decode steps; ``forward(rows, kv_len)`` must read only the engine's static buffers."""

    def __init__(self, forward: Callable[[int, int], torch.Tensor], make_safe: Callable[[int], None]) -> None:
        self._forward = forward
        self._make_safe = make_safe  # set the first rows' inputs so a warm-up run writes only scratch
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._pool = torch.cuda.graph_pool_handle()
        self.captures = 0

    def clear(self) -> None:
        self._graphs.clear()
        self._pool = torch.cuda.graph_pool_handle()  # the old pool goes with its graphs

    def ready(self, rows: int, kv_len: int) -> bool:
        return (rows, kv_len) in self._graphs

    def covering(self, rows: int, kv_len: int) -> int | None:
        """The fewest rows, more than ``rows``, of a graph captured for ``kv_len`` positions; None if none."""
        wider = [r for r, length in self._graphs if length == kv_len and r > rows]
        return min(wider) if wider else None

    def capture(self, rows: int, kv_len: int) -> None:
        """Capture the step for this shape (call before the real inputs are written)."""
        self._make_safe(rows)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._forward(rows, kv_len)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            logits = self._forward(rows, kv_len)
        self._graphs[(rows, kv_len)] = (graph, logits)
        self.captures += 1
        log.debug("local engine: captured a decode graph for %d rows x %d positions", rows, kv_len)

    def replay(self, rows: int, kv_len: int) -> torch.Tensor:
        graph, logits = self._graphs[(rows, kv_len)]
        graph.replay()
        return logits
