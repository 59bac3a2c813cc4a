"""The serving processes' collector policy (service/collector.py), in a fresh interpreter
so this test process's own collector is left as it is."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent(
    """
    import gc, weakref
    from service.collector import YOUNG_THRESHOLD, settle_heap

    class Node:
        pass

    held = [Node() for _ in range(100)]
    settle_heap()
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD, gc.get_threshold()
    assert gc.get_freeze_count() >= 100, gc.get_freeze_count()
    # What existed at start-up is no longer scanned; cycles made later still go.
    late = Node()
    late.me = late
    alive = weakref.ref(late)
    del late
    gc.collect()
    assert alive() is None
    print("ok")
    """
)


def test_the_start_up_heap_is_frozen_and_later_cycles_are_still_collected() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
