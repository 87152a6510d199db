"""agentr1.core.gil_switch_interval: shorter GIL hand-offs for a block. Cases that time threads run in a fresh
interpreter (the interval is process-wide)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from agentr1.core import gil_switch_interval


def test_overlapping_blocks_keep_the_first_value_and_the_last_restores_what_was_there():
    before = sys.getswitchinterval()
    with gil_switch_interval(0.001):
        assert sys.getswitchinterval() == pytest.approx(0.001)
        with gil_switch_interval(0.002):  # (another rollout at the same time: the first one's value stays)
            assert sys.getswitchinterval() == pytest.approx(0.001)
        assert sys.getswitchinterval() == pytest.approx(0.001)
    assert sys.getswitchinterval() == before
    with gil_switch_interval(None):
        assert sys.getswitchinterval() == before
    with pytest.raises(ValueError, match="positive"), gil_switch_interval(0):
        pass
    assert sys.getswitchinterval() == before


def test_a_thread_doing_io_gets_the_gil_back_sooner_from_a_busy_thread():
    """A thread that gives the GIL up 40 times (a short sleep, as a socket call does) while another thread computes
    waits for the busy one each time: about the switch interval. With 0.5 ms it is done several times sooner."""
    code = textwrap.dedent("""
        import threading, time
        from agentr1.core import gil_switch_interval

        def io_thread_seconds():
            stop = threading.Event()
            def busy():
                while not stop.is_set():
                    sum(range(1000))
            spinner = threading.Thread(target=busy)
            spinner.start()
            time.sleep(0.05)
            started = time.perf_counter()
            for _ in range(40):
                time.sleep(0.0001)
            took = time.perf_counter() - started
            stop.set()
            spinner.join()
            return took

        default = io_thread_seconds()
        with gil_switch_interval(0.0005):
            short = io_thread_seconds()
        print(default, short)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    default, short = map(float, result.stdout.split())
    assert default > 0.1, default  # ~40 x 5 ms
    assert short < default / 3, (default, short)
