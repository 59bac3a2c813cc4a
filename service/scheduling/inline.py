"""Short executions on the event loop's own thread (decision 067).

For a small model the hand-off to an instance thread costs the engine more than the
execution: a queue put that wakes the thread, the GIL passed back and forth while both
run, and a mailbox post that wakes the loop again (decision 063). The default scheduler
therefore runs a request on the loop's thread when the model's executions are known to
be short, and the price, a loop that blocks for that time, stays below ``BOUND_NS``.

"Known to be short" is what this gate decides, on the loop's thread, from the model's own
executions: a model starts on its threads, and once the lower quartile of
``QUALIFY_RUNS`` of their executions (dispatch to outputs split, as ``BatchTimings`` has
it) is within the bound, requests run on the loop. Each run there is measured too: two in
a row over ``SLOW_NS``, or a window of ``QUALIFY_RUNS`` whose median is over the bound,
send the model back to its threads, and it must qualify again over twice as many runs
(up to ``MAX_RUNS``), so a model whose executions are sometimes long does not block the
loop often. Inputs over ``MAX_BYTES`` always go to the threads, but for a model whose
instances answer with views of their inputs (``answers_with_views``: the built-in
identity), whose executions do not grow with the bytes (decision 076).

Fairness and load: a turn of the loop executes at most about ``BOUND_NS`` for all models
together (``LoopTurn``); what else arrived in that turn goes to the threads, which run it
beside the loop, as do requests while the model's queue holds work or its instances are
all busy. So under load, when the loop is the engine's serial part, most executions stay
on the threads, and several instances still run in parallel there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from ..backends.base import Array, RequestInstance
from .handoff import one_per_loop
from .instances import InstancePool, Remote

__all__ = [
    "BOUND_NS",
    "MAX_BYTES",
    "InlineGate",
    "LoopTurn",
    "inline_capable",
    "size_free",
    "small_inputs",
    "turn_of",
]

#: The longest execution (ns) a model may have to run on the loop: what the loop's other
#: requests then wait, about what one hand-off costs them anyway on a busy engine.
BOUND_NS = 100_000
#: One run on the loop over this (ns) sends the model back to its threads at once.
SLOW_NS = 1_000_000
#: The inputs of a request run on the loop hold at most this many bytes: an execution's
#: time grows with its data, which the estimate of small requests does not foretell.
MAX_BYTES = 64 * 1024
#: Executions on the threads measured before the model may run on the loop (the first
#: time; doubled each time it is sent back, up to ``MAX_RUNS``).
QUALIFY_RUNS = 16
MAX_RUNS = 1024

log = logging.getLogger(__name__)


def inline_capable(pool: InstancePool) -> bool:
    """Whether the pool's instances may execute on the loop's thread at all: in-process
    tensor backends (not a request backend such as a Python model, not an instance in
    a worker process of its own), or request backends that answer with views of their
    inputs (``size_free``), and no rate limiter (whose wait is the threads')."""
    return bool(pool.workers) and all(
        w.limiter is None
        and (not isinstance(w.instance, RequestInstance) or _views(w.instance))
        and not isinstance(w.instance, Remote)
        for w in pool.workers
    )


def size_free(pool: InstancePool) -> bool:
    """Every instance declares ``answers_with_views``: it reads none of its inputs' bytes
    (the built-in identity hands them back as they are), so an execution takes as long
    for 1 MiB as for 4 bytes and ``MAX_BYTES`` does not apply (decision 076)."""
    return bool(pool.workers) and all(_views(w.instance) for w in pool.workers)


def _views(instance: object) -> bool:
    return getattr(instance, "answers_with_views", False) is True


def small_inputs(inputs: Mapping[str, Array]) -> bool:
    """The request's inputs fit ``MAX_BYTES``."""
    total = 0
    for array in inputs.values():
        total += array.nbytes
    return total <= MAX_BYTES


class InlineGate:
    """Whether the model's executions are short enough to run on the loop (``open``);
    fed, on the loop's thread, with the span of each execution."""

    __slots__ = ("_needed", "_samples", "_slow", "_streak", "inline_runs", "name", "open")

    def __init__(self, name: str = "") -> None:
        self.name = name  # the model's, for the log
        self.open = False
        #: Executions run on the loop so far (tests and measurements look at it).
        self.inline_runs = 0
        self._samples: list[int] = []
        self._needed = QUALIFY_RUNS
        self._slow = False  # the last run on the loop took over SLOW_NS
        self._streak = 0  # runs on the loop since it last opened

    def on_thread(self, span_ns: int) -> None:
        """An execution on an instance thread took ``span_ns``. GIL waits count in it
        (the thread waits for the busy loop after the backend returns), hence the lower
        quartile of the runs: the ones that did not wait, the model's own time."""
        if self.open:
            return
        samples = self._samples
        samples.append(span_ns)
        if len(samples) < self._needed:
            return
        samples.sort()
        quartile = samples[len(samples) // 4]
        samples.clear()
        if quartile <= BOUND_NS:
            self.open, self._slow, self._streak = True, False, 0
            log.debug(
                "model '%s': executions of about %d us now run on the event loop's thread",
                self.name,
                quartile // 1000,
            )

    def on_loop(self, span_ns: int) -> None:
        """An execution on the loop took ``span_ns``. Two in a row over ``SLOW_NS`` (one
        may be the machine's: the thread preempted on a busy core), or a median over the
        bound in a window of ``QUALIFY_RUNS``, and the next ones go to the threads."""
        self.inline_runs += 1
        self._streak += 1
        if span_ns > SLOW_NS:
            if self._slow:
                self.close(span_ns)
                return
            self._slow = True
        else:
            self._slow = False
        samples = self._samples
        samples.append(span_ns)
        if len(samples) < QUALIFY_RUNS:
            return
        samples.sort()
        median = samples[len(samples) // 2]
        samples.clear()
        if median > BOUND_NS:
            self.close(median)
        elif self._streak >= MAX_RUNS:  # long good: a later slip qualifies again soon
            self._needed = QUALIFY_RUNS

    def close(self, span_ns: int) -> None:
        """Back to the threads; qualifying again takes twice as many runs."""
        log.debug(
            "model '%s': executions on the event loop's thread took %d us: back to the "
            "instance threads",
            self.name,
            span_ns // 1000,
        )
        self.open = False
        self._samples.clear()
        self._needed = min(self._needed * 2, MAX_RUNS)


class LoopTurn:
    """What one turn of the loop has spent executing models (``spent``, ns), whatever the
    model: once a turn has spent ``BOUND_NS``, the rest of the requests that arrived
    together (a frame of many, under load) go to the threads, so the loop's other work
    waits for about one bound at most, and a busy loop, the engine's serial part, does
    not take on the executions its threads would run beside it."""

    __slots__ = ("_free", "loop", "spent")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.spent = 0

        def free() -> None:
            self.spent = 0

        self._free = free

    def add(self, span_ns: int) -> None:
        """An execution on the loop took ``span_ns`` in this turn."""
        if not self.spent:
            self.loop.call_soon(self._free)  # runs after the turn's I/O callbacks
        self.spent += max(span_ns, 1)


_turns: dict[asyncio.AbstractEventLoop, LoopTurn] = {}


def turn_of(loop: asyncio.AbstractEventLoop) -> LoopTurn:
    """The one ``LoopTurn`` of ``loop`` (called on the loop's thread)."""
    return one_per_loop(_turns, loop, LoopTurn)
