"""Which live sequence owns which instance and slot: pure bookkeeping with time passed in.

Direct: each sequence owns one batch slot of one instance until it ends. Oldest: each
sequence is a candidate on one instance (up to ``max_candidate_sequences`` there). A new
sequence that finds no room waits in a FIFO backlog and gets the first room freed.

As in Triton, a correlation ID stops routing to its sequence once the END request is
accepted (a later request needs START and begins a new sequence, possibly while the old
one still runs its queued requests), and a START for an ID whose sequence has not ended
joins that sequence: its queued requests run first, then the START resets its state.
Triton's reaper is followed too: a sequence holding a room is force-ended when no request
for it has been accepted for the idle time (its queued requests still run, then its room
is freed), and a backlogged sequence whose requests' timeout passes is dropped.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ...backends.base import StateShapes
from ...errors import InvalidArgument
from ..base import Array, Job

__all__ = ["LiveSequence", "SequenceTable"]

log = logging.getLogger(__name__)

CorrelationId = int | str


#: Sequence keys, never reused: a new sequence with an old correlation ID is another key.
_keys = itertools.count(1)


@dataclass(eq=False)
class LiveSequence:
    cid: CorrelationId
    last_ns: int
    instance: int | None = None  # None while in the backlog
    slot: int = 0
    pending: deque[Job] = field(default_factory=deque)
    states: list[Array] | None = None  # implicit state kept in the engine; None: initial
    # Its shapes, wherever it is kept (the instance's worker, when it holds it); None:
    # nothing kept yet, the next request starts from the initial state.
    shapes: StateShapes | None = None
    key: int = field(default_factory=_keys.__next__)  # names its state in that worker
    executing: bool = False
    ending: bool = False  # END accepted (or idled out): nothing joins it any more
    expires_ns: int | None = None  # while in the backlog: when its requests time out

    @property
    def head(self) -> Job | None:
        """The next request to run, when this sequence may run one now."""
        if self.instance is None or self.executing or not self.pending:
            return None
        return self.pending[0]

    @property
    def finished(self) -> bool:
        """Ended and nothing left to run: its room can go to another sequence."""
        return self.ending and not self.pending and not self.executing


class SequenceTable:
    def __init__(
        self,
        model: str,
        instances: int,
        capacity: int,
        idle_ns: int,
        on_release: Callable[[LiveSequence], None] | None = None,
    ) -> None:
        """``on_release`` hears of each sequence that leaves its room (before it does)."""
        self.model = model
        self._on_release = on_release
        self.capacity = capacity  # slots (Direct) or candidates (Oldest) per instance
        self.idle_ns = idle_ns
        self._routes: dict[CorrelationId, LiveSequence] = {}  # where a new request goes
        self._live: dict[LiveSequence, None] = {}  # every sequence holding a room or waiting
        self._rooms: list[list[LiveSequence | None]] = [[None] * capacity for _ in range(instances)]
        self._backlog: deque[LiveSequence] = deque()

    def __len__(self) -> int:
        return len(self._live)

    def accept(self, job: Job, now_ns: int) -> LiveSequence:
        """File ``job`` under its sequence, starting one (or refusing) as its flags say."""
        cid = job.correlation_id
        assert cid is not None
        sequence = self._routes.get(cid)
        if job.sequence_start:
            if sequence is not None:
                log.warning(
                    "sequence %s for model '%s' has a conflict. The previous sequence did not "
                    "end before this sequence start. Previous sequence will be terminated early.",
                    cid,
                    self.model,
                )
            else:
                sequence = LiveSequence(cid, now_ns)
                self._routes[cid] = sequence
                self._live[sequence] = None
                self._place(sequence)
        elif sequence is None:
            raise InvalidArgument(
                f"inference request for sequence {cid} to model '{self.model}' must specify "
                "the START flag on the first request of the sequence"
            )
        sequence.pending.append(job)
        sequence.last_ns = now_ns
        if sequence.instance is None and job.timeout_us:
            expires = now_ns + job.timeout_us * 1000
            if sequence.expires_ns is None or expires < sequence.expires_ns:
                sequence.expires_ns = expires
        if job.sequence_end:
            self._end(sequence)
        return sequence

    def continues(self, cid: CorrelationId) -> bool:
        """A request for ``cid`` without START joins a sequence here."""
        return cid in self._routes

    def route(self, cid: CorrelationId) -> LiveSequence | None:
        """The sequence a request for ``cid`` without START joins (None: none)."""
        return self._routes.get(cid)

    def end(self, sequence: LiveSequence) -> None:
        """End ``sequence`` as an END request would (iterative sequences end when the
        request that started them is released for good)."""
        self._end(sequence)

    def _end(self, sequence: LiveSequence) -> None:
        """No later request joins ``sequence``; its queued ones still run."""
        sequence.ending = True
        if self._routes.get(sequence.cid) is sequence:
            del self._routes[sequence.cid]

    def _place(self, sequence: LiveSequence) -> None:
        best = None
        for index, rooms in enumerate(self._rooms):
            free = rooms.count(None)
            if free and (best is None or free > self._rooms[best].count(None)):
                best = index
        if best is None:
            self._backlog.append(sequence)
            return
        slot = self._rooms[best].index(None)
        self._rooms[best][slot] = sequence
        sequence.instance, sequence.slot = best, slot

    def release(self, sequence: LiveSequence) -> None:
        """The sequence ended or idled out: free its room for the oldest backlog entry."""
        self._live.pop(sequence, None)
        if self._routes.get(sequence.cid) is sequence:
            del self._routes[sequence.cid]
        if sequence.instance is None:
            if sequence in self._backlog:
                self._backlog.remove(sequence)
            return
        if self._on_release is not None:
            self._on_release(sequence)
        self._rooms[sequence.instance][sequence.slot] = None
        sequence.instance = None
        if self._backlog:
            self._place(self._backlog.popleft())

    def expire_idle(self, now_ns: int) -> list[LiveSequence]:
        """Force-end the sequences holding a room that accepted no request for the idle
        time (Triton's reaper; a backlogged one waits for its room). Those with nothing
        queued or running free their room now, the others once their requests ran."""
        if self.idle_ns <= 0:
            return []
        idle = [
            s
            for s in self._live
            if not s.ending and s.instance is not None and now_ns - s.last_ns >= self.idle_ns
        ]
        for sequence in idle:
            self._end(sequence)
            if sequence.finished:
                self.release(sequence)
        return idle

    def expire_backlog(self, now_ns: int) -> list[LiveSequence]:
        """Drop the backlogged sequences whose requests' timeout passed; the caller fails
        their queued requests."""
        expired = [s for s in self._backlog if s.expires_ns is not None and s.expires_ns <= now_ns]
        for sequence in expired:
            self._end(sequence)
            self.release(sequence)
        return expired

    def next_deadline(self) -> int | None:
        """When ``expire_idle`` or ``expire_backlog`` next has something to do."""
        times = [s.expires_ns for s in self._backlog if s.expires_ns is not None]
        if self.idle_ns > 0:
            times += [
                s.last_ns + self.idle_ns
                for s in self._live
                if not s.ending and s.instance is not None
            ]
        return min(times) if times else None

    def rooms(self, instance: int) -> list[LiveSequence | None]:
        return self._rooms[instance]

    def pending_count(self) -> int:
        return sum(len(s.pending) for s in self._live)

    def backlog_count(self) -> int:
        return sum(len(s.pending) for s in self._backlog)

    def busy(self) -> bool:
        return any(s.pending or s.executing for s in self._live)

    def sequences(self) -> list[LiveSequence]:
        return list(self._live)
