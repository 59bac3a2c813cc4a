"""Whether new inference requests get in: one small array every process of a server shares.

Triton refuses new inferences once its core stops, and with no HTTP connection holding
its HTTP stop the core stops as soon as its signal handler has run (``src/main.cc``).
Here the signal reaches one process (the supervisor with ``--frontends N``: Triton's qa
signals the server's one pid), requests are admitted in another (the engine's core), and
the REST gateways whose HTTP connections may hold the stop are more processes again
(decision 033). Passing the news along woke four or five processes in turn before the
first refusal, milliseconds that Triton's qa ``L0_grpc_state_cleanup`` does not give.

So the process that takes the signal decides in its handler (``signalled``), before any
other process has woken: no gateway holds HTTP connections, so the refusals begin now,
and the core, reading the flags at every admission, refuses the very next request;
otherwise the HTTP step comes first and the core's stop raises them once it ends (as
before). The array holds the two flags the core reads (new stream requests refused, new
unary ones refused: the lame duck may hold the second back, ``runtime.py``) and, per
frontend process, how many of the gateways following it hold HTTP connections or have
not said yet (``grpc_frontend/gateway_link.py``). Flags are only ever raised, by
whichever process comes first, so no lock is needed.
"""

from __future__ import annotations

import ctypes
from multiprocessing.context import BaseContext

__all__ = ["Admission"]

_STREAMS = 0  # new stream requests are refused
_UNARY = 1  # new unary requests are refused
_SLOTS = 2  # from here: one count per frontend process


class Admission:
    """The flags and counts; ``context`` (a multiprocessing context): in memory shared
    with the processes it spawns (passed to them as an argument), else this process's."""

    def __init__(self, slots: int = 1, context: BaseContext | None = None) -> None:
        size = _SLOTS + max(1, slots)
        shared = context.RawArray if context is not None else None
        self._cells = shared(ctypes.c_int, size) if shared else (ctypes.c_int * size)()

    @property
    def streams_refused(self) -> bool:
        return bool(self._cells[_STREAMS])

    @property
    def unary_refused(self) -> bool:
        return bool(self._cells[_UNARY])

    def refuse_streams(self) -> None:
        self._cells[_STREAMS] = 1

    def refuse_all(self) -> None:
        self._cells[_STREAMS] = 1
        self._cells[_UNARY] = 1

    def set_busy(self, slot: int, gateways: int) -> None:
        """Frontend ``slot`` (0-based) is followed by ``gateways`` that hold HTTP
        connections, or have not said whether they do."""
        self._cells[_SLOTS + slot] = gateways

    def busy(self) -> int:
        """Gateways, over every frontend, that hold HTTP connections (or may)."""
        return sum(self._cells[_SLOTS:])

    def signalled(self, lame_duck: bool) -> bool:
        """The stop signal arrived: with no gateway holding HTTP connections, new requests
        are refused from now on (new unary ones too, unless a ``lame_duck`` serves them a
        while); True when so. Safe in a signal handler: no lock, no allocation to speak of."""
        if self.busy():
            return False  # the HTTP step first (decision 033): the core's stop refuses
        if lame_duck:
            self.refuse_streams()
        else:
            self.refuse_all()
        return True
