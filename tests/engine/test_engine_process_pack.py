"""How weights travel to the engine process (``engine.process_messages.pack``/``unpack``): one buffer per dtype,
in shared memory where /dev/shm has room, else as bytes through the pipe; the same tensors either way."""

from __future__ import annotations

import pickle

import pytest
import torch

from agentr1.engine import process_messages as engine_process


@pytest.mark.parametrize("shm_free", [0, 1 << 40])
def test_packed_weights_unpack_to_the_same_tensors(monkeypatch, shm_free):
    monkeypatch.setattr(engine_process, "_shm_free", lambda: shm_free)
    tensors = {"w": torch.randn(3, 4), "h": torch.randn(5).to(torch.bfloat16), "t": torch.randn(4, 3).t(),
               "i": torch.arange(6).view(2, 3)}
    flats, specs = engine_process.pack(tensors)
    assert len(flats) == 3  # one buffer per dtype
    assert all(isinstance(f, bytes) for f in flats.values()) == (shm_free == 0)
    if shm_free == 0:
        flats, specs = pickle.loads(pickle.dumps((flats, specs)))  # plain bytes: what the pipe carries
    out = engine_process.unpack((flats, specs))
    assert list(out) == list(tensors)
    for name, t in tensors.items():
        assert out[name].dtype == t.dtype and torch.equal(out[name], t)
