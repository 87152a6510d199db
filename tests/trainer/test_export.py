"""A servable HF directory written from the trained tensors themselves (``policy/export.py``): the weights read back
bit for bit, and saving adds no copy of them to the process's memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agentr1.trainer.policy.export import save_hf_directory


def test_the_weights_read_back_bit_for_bit_without_the_tied_output(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    (source / "model.safetensors").write_bytes(b"old weights: never copied")
    generator = torch.Generator().manual_seed(0)
    tensors = {"model.embed_tokens.weight": torch.randn(11, 4, generator=generator),
               "model.norm.weight": torch.randn(4, generator=generator).to(torch.bfloat16),
               "model.proj.weight": torch.randn(4, 6, generator=generator).t(),  # not contiguous
               "lm_head.weight": torch.randn(11, 4, generator=generator)}
    out = save_hf_directory(tensors.items(), source, tmp_path / "hf")
    loaded = load_file(str(out / "model.safetensors"))
    assert set(loaded) == set(tensors) - {"lm_head.weight"}
    assert all(torch.equal(loaded[name], tensors[name]) and loaded[name].dtype == tensors[name].dtype for name in loaded)
    assert json.loads((out / "config.json").read_text()) == {"tie_word_embeddings": True}


_SAVE_AND_MEASURE = """
import json, sys, torch
from pathlib import Path
from agentr1.trainer.policy.export import save_hf_directory
source = Path(sys.argv[1]); source.mkdir(); (source / "config.json").write_text(json.dumps({}))
def peak_kb():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
tensors = [(f"layer{i}.weight", torch.ones(1024, 1024, 16)) for i in range(4)]  # 4 x 64 MiB
open("/proc/self/clear_refs", "w").write("5")  # the high-water mark starts again from the current memory
before = peak_kb()
save_hf_directory(tensors, source, Path(sys.argv[2]))
print(peak_kb() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_saving_adds_no_copy_of_the_weights(tmp_path: Path) -> None:
    """256 MiB of weights saved in a fresh process: its high-water mark rises by far less than one copy of them
    (with a copy of each tensor, as before 2026-12-06: by 256 MiB)."""
    out = subprocess.run([sys.executable, "-c", _SAVE_AND_MEASURE, str(tmp_path / "source"), str(tmp_path / "hf")],
                         capture_output=True, text=True, check=True)
    rise_mib = int(out.stdout.strip()) / 1024
    assert rise_mib < 64, f"saving 256 MiB raised the peak by {rise_mib:.0f} MiB"
    assert (tmp_path / "hf" / "model.safetensors").stat().st_size > 256 << 20
