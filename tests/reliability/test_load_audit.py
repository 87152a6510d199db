"""The load test (bench/load_test.py), scaled down: a real gateway process, real openai clients,
two waves of 32 concurrent sessions x 5 turns; every answered call is in the store exactly once, in
its session and order, and the gateway's memory levels off instead of growing with every wave."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from load_test import load_test


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_answered_call_is_stored_once_in_order_and_memory_levels_off(tmp_path):
    summary = load_test(kind="instant", db=f"sqlite:///{tmp_path / 'load.db'}", sessions=32, turns=5, waves=3,
                        sample_interval_s=0.2)
    assert summary["errors"] == 0, summary["first_errors"]
    assert summary["answered"] == summary["stored_steps"] == 3 * 32 * 5
    assert summary["problems"] == 0, summary["first_problems"]
    first, *later = summary["rss_after_wave_mib"]
    # the first wave warms up (imports, caches, pools); later waves of new sessions must not keep adding
    assert later[-1] - first < 40, summary["rss_after_wave_mib"]
    assert summary["rss_peak_mib"] - summary["rss_start_mib"] < 150, summary
