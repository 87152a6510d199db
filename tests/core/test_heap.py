"""agentr1.core.heap: full garbage collections kept off the serving path by freezing the heap. Each case runs in
a fresh interpreter: the freeze is process-wide, and freeze_heap cannot be undone."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_frozen_block_freezes_the_heap_and_the_last_block_to_end_unfreezes_it():
    out = _run("""
        import gc, threading
        from agentr1.core.heap import frozen_heap
        keep = [[i] for i in range(10_000)]
        seen = []
        with frozen_heap():
            seen.append(gc.get_freeze_count())
            inner_done = threading.Event()
            def other():
                with frozen_heap():
                    seen.append(gc.get_freeze_count() > 0)
                inner_done.set()
            threading.Thread(target=other).start()
            inner_done.wait()
            seen.append(gc.get_freeze_count())  # the other block ended: this one still holds the freeze
        seen.append(gc.get_freeze_count())
        print(seen[0] > 10_000, seen[1], seen[2] > 10_000, seen[3])
    """)
    assert out == "True True True 0"


def test_after_freeze_heap_a_block_leaves_the_heap_frozen_and_cyclic_garbage_made_later_is_still_collected():
    out = _run("""
        import gc, weakref
        from agentr1.core.heap import freeze_heap, frozen_heap
        freeze_heap()
        frozen = gc.get_freeze_count()
        with frozen_heap():
            pass
        class Node: pass
        a, b = Node(), Node()
        a.other, b.other = b, a
        probe = weakref.ref(a)
        del a, b
        gc.collect()
        print(frozen > 0, gc.get_freeze_count() >= frozen, probe() is None)
    """)
    assert out == "True True True"
