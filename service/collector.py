"""The cyclic garbage collector in a serving process: the start-up heap frozen, young
collections rarer.

A request makes no reference cycles on the serving path (its objects die by reference
count), yet CPython's collector runs a young collection every 700 net container
allocations and, now and then, a full one over every object the process holds: the
imports of grpc, protobuf, numpy and ONNX Runtime and the loaded models, tens of
thousands of objects. Measured in the engine under load (2 cores, unbatched add_sub at
13k requests/s, `gc.callbacks` timing each collection): 1,628 young, 148 middle and 14
full collections in 5.5 s took 356 ms, about 6 µs of the loop thread per request, and
collected nothing but 6 objects. So once a process has started (its models loaded), what
it holds is collected once and frozen (``gc.freeze``: never scanned again, still freed by
reference count), and the young threshold goes from 700 to 10,000 allocations; cycles
made later (a model loaded afterwards, an exception's traceback) are still collected.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "settle_heap"]

#: Net container allocations between young collections (CPython's default is 700).
YOUNG_THRESHOLD = 10_000


def settle_heap() -> None:
    """Called once a serving process has started: collect, freeze what is left, and make
    young collections rarer."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
