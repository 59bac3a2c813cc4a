"""One channel between two processes: descriptor rings in shared memory, a wake-up only
when the reader sleeps (issue 37, docs/decisions/069-one-channel.md).

A channel is one memfd holding two single-producer single-consumer rings, one per
direction, and two socketpairs, one per ring: its *doorbells*. A message is a record in a
ring: a fixed descriptor (``DESCRIPTOR``: op, flags, inline bytes, request id, and an
offset and length into the writer's tensor arena) followed by up to ``max_inline`` bytes
of its own (the message's metadata), padded to 16 bytes. Tensor bytes do not cross in the
ring: the writer places them in an arena it alone allocates and the descriptor names
where (``offset``, ``length``); the reader reads them there.

Why not a socket with frames: each message then costs a ``write`` on one side and a
wake-up and a ``read`` on the other, and the bytes are copied twice through the kernel.
Here a writer stores records and one index; it writes a doorbell byte only when the
reader said it sleeps (``SLEEPING`` odd) and has not been rung for that sleep yet, so a
reader that keeps up is never woken and a sleeping one is woken once for everything
written meanwhile. The same goes the other way for a writer waiting on a full ring.

The store-load race: a reader sets SLEEPING and then looks at the tail once more; a
writer stores the tail and then looks at SLEEPING. Without a full barrier between each
store and the load after it both could read the old value (x86 lets a load pass an
earlier store) and the reader would sleep on a written record. Both sides run a locked
instruction there (``_fence``: an uncontended lock taken and released, which on Linux is
an atomic compare-and-swap and an atomic add), and a sleeping reader still wakes every
``backstop`` seconds to look, so a wake-up lost anyway costs that much latency, never a
hang. Records before their index: on x86-64 stores become visible in program order, so a
reader that sees a tail sees the records below it; CPython cannot order stores on weakly
ordered processors, so ``SUPPORTED`` is False there and the callers keep their socket.

A dead peer: its ends of the socketpairs close with it, so a sleeping reader (or a
writer waiting for room) reads end-of-stream on its doorbell and gets ``PeerGone`` once
the ring is drained.

Threads: one thread writes a ring and one reads it (a side with several sending threads
takes a lock around ``send``). ``Endpoint`` blocks; ``AsyncEndpoint`` serves the same
rings from an asyncio loop (``add_reader`` on the doorbells).
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import os
import platform
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Final

__all__ = [
    "DESCRIPTOR",
    "SUPPORTED",
    "AsyncEndpoint",
    "Endpoint",
    "PeerGone",
    "Record",
    "create",
]

#: op, flags, inline bytes, request id, arena offset, arena length.
DESCRIPTOR: Final = struct.Struct("<HHIQQQ")
_DESC = DESCRIPTOR.size
_ALIGN = 32  # a descriptor: the room left at the end always holds a PAD
_ROUND = ~(_ALIGN - 1)
_PAD = 0xFFFF  # a record that fills the ring's end: the next one starts at its beginning
_PAGE = 4096
_WORDS_PER_RING = 16  # two cache lines: the writer's (tail, waiting), the reader's
_TAIL, _WAITING, _HEAD, _SLEEPING = 0, 1, 8, 9
_MAGIC_WORD, _CAPACITY_WORD = 64, 65
_MAGIC = 0x52494E4731  # "RING1"
_TIMEVAL = struct.Struct("@ll")

#: The processors whose store order makes a record visible before the index past it.
SUPPORTED: Final = platform.machine().lower() in ("x86_64", "amd64")

#: A record read: (op, flags, request id, arena offset, arena length, inline bytes).
Record = tuple[int, int, int, int, int, bytes]
#: A record to write: (op, request id, inline bytes, arena offset, arena length, flags).
Outgoing = tuple[int, int, bytes | bytearray | memoryview, int, int, int]


class PeerGone(ConnectionError):
    """The other process closed its end (it exited or was killed)."""


def _fence(lock: threading.Lock) -> None:
    """A full memory barrier: taking and giving back an uncontended lock runs two locked
    instructions (``sem_trywait``'s compare-and-swap, ``sem_post``'s add)."""
    lock.acquire()
    lock.release()


class _Ring:
    """One direction: the shared words and data, and this side's private positions."""

    def __init__(self, memory: mmap.mmap, index: int, capacity: int) -> None:
        self.words = memoryview(memory).cast("Q")[
            index * _WORDS_PER_RING : (index + 1) * _WORDS_PER_RING
        ]
        start = _PAGE + index * capacity
        self.data = memoryview(memory)[start : start + capacity]
        self.capacity = capacity
        self.mask = capacity - 1
        self.position = 0  # the writer's tail, or the reader's head (private)
        self.published = 0  # the writer's last stored tail
        self.seen = 0  # the writer's last read head, or the reader's last read tail
        self.last_rung = 0  # the SLEEPING (or WAITING) value last rung for
        self.fence = threading.Lock()

    def release(self) -> None:
        self.words.release()
        self.data.release()


class Endpoint:
    """One side of a channel, used from plain threads: ``send`` (or ``put`` then
    ``flush``) on the ring out, ``recv`` on the ring in."""

    def __init__(
        self,
        memory_fd: int,
        out_bell: socket.socket,
        in_bell: socket.socket,
        creator: bool,
        backstop: float = 0.1,
    ) -> None:
        try:
            self._memory = mmap.mmap(memory_fd, 0)
        finally:
            os.close(memory_fd)
        header = memoryview(self._memory).cast("Q")
        try:
            capacity = header[_CAPACITY_WORD]
            if header[_MAGIC_WORD] != _MAGIC:
                raise ValueError("not a ring channel's memory")
            # A peer's memory is checked, not trusted: both rings lie inside it.
            if capacity < _PAGE or capacity & (capacity - 1):
                raise ValueError(f"a ring capacity of {capacity}")
            if len(self._memory) < _PAGE + 2 * capacity:
                raise ValueError("a ring channel's memory smaller than its rings")
        except BaseException:
            header.release()
            self._memory.close()
            raise
        header.release()
        self.capacity = capacity
        self.max_inline = capacity // 4 - _DESC
        self._out = _Ring(self._memory, 0 if creator else 1, capacity)
        self._in = _Ring(self._memory, 1 if creator else 0, capacity)
        self.out_bell, self.in_bell = out_bell, in_bell
        self.backstop = backstop
        # Blocking, with a kernel receive timeout: a sleep is one ``recv``, not a
        # ``poll`` and a ``recv`` as a Python socket timeout would make it.
        timeout = _TIMEVAL.pack(int(backstop), int(backstop % 1 * 1e6))
        for bell in (out_bell, in_bell):
            bell.settimeout(None)
            bell.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeout)
        self.closed = False

    # -- writing -----------------------------------------------------------------------

    def try_put(
        self,
        op: int,
        request_id: int = 0,
        inline: bytes | bytearray | memoryview = b"",
        offset: int = 0,
        length: int = 0,
        flags: int = 0,
    ) -> bool:
        """Write one record, not yet visible to the reader (``flush``); False when the
        ring has no room for it."""
        return self.try_put_many(((op, request_id, inline, offset, length, flags),)) == 1

    def try_put_many(self, records: Sequence[Outgoing]) -> int:
        """Write records in order while they fit (not yet visible: ``flush``); how many
        were written. One call for a loop iteration's messages: the per-record work is
        a ``pack_into`` and a slice assignment."""
        ring = self._out
        data, mask, capacity, limit = ring.data, ring.mask, ring.capacity, self.max_inline
        pack = DESCRIPTOR.pack_into
        tail, seen = ring.position, ring.seen
        written = 0
        for op, request_id, inline, offset, length, flags in records:
            size = len(inline)
            if size > limit:
                raise ValueError(f"{size} inline bytes, at most {limit}: use the arena")
            whole = (_DESC + size + _ALIGN - 1) & _ROUND
            start = tail & mask
            skip = capacity - start if start + whole > capacity else 0
            if tail + skip + whole - seen > capacity:
                seen = ring.seen = ring.words[_HEAD]
                if tail + skip + whole - seen > capacity:
                    break
            if skip:
                pack(data, start, _PAD, 0, 0, 0, 0, 0)
                tail += skip
                start = 0
            pack(data, start, op, flags, size, request_id, offset, length)
            if size:
                data[start + _DESC : start + _DESC + size] = inline
            tail += whole
            written += 1
        ring.position = tail
        return written

    def flush(self) -> None:
        """Make the records written so far visible; ring the reader if it sleeps."""
        ring = self._out
        if ring.position == ring.published:
            return
        ring.words[_TAIL] = ring.published = ring.position
        _fence(ring.fence)
        sleeping = ring.words[_SLEEPING]
        if sleeping & 1 and sleeping != ring.last_rung:
            ring.last_rung = sleeping
            self._ring(self.out_bell)

    def put(
        self,
        op: int,
        request_id: int = 0,
        inline: bytes | bytearray | memoryview = b"",
        offset: int = 0,
        length: int = 0,
        flags: int = 0,
    ) -> None:
        """``try_put``, waiting for room (after a ``flush``) while the ring is full."""
        while not self.try_put(op, request_id, inline, offset, length, flags):
            self.flush()
            self._wait_room()

    def put_many(self, records: Sequence[Outgoing]) -> None:
        """``try_put_many``, waiting for room (after a ``flush``) while the ring is full."""
        done = self.try_put_many(records)
        while done < len(records):
            self.flush()
            self._wait_room()
            done += self.try_put_many(records[done:])

    def send(
        self,
        op: int,
        request_id: int = 0,
        inline: bytes | bytearray | memoryview = b"",
        offset: int = 0,
        length: int = 0,
        flags: int = 0,
    ) -> None:
        self.put(op, request_id, inline, offset, length, flags)
        self.flush()

    def _room_announced(self) -> bool:
        """Say that this writer waits for room, then look again (the store-load race)."""
        ring = self._out
        ring.words[_WAITING] = ring.words[_WAITING] + 1  # odd: waiting
        _fence(ring.fence)
        ring.seen = ring.words[_HEAD]
        return ring.position - ring.seen < ring.capacity // 2

    def _wait_room(self) -> None:
        ring = self._out
        try:
            if not self._room_announced():
                self._sleep(self.out_bell)
        finally:
            ring.words[_WAITING] = ring.words[_WAITING] + 1  # even: not waiting

    # -- reading -----------------------------------------------------------------------

    def poll(self) -> list[Record]:
        """The records written and flushed since the last call, without waiting."""
        ring = self._in
        tail = ring.seen = ring.words[_TAIL]
        head = ring.position
        if head == tail:
            return []
        data, mask, capacity, limit = ring.data, ring.mask, ring.capacity, self.max_inline
        if not head < tail <= head + capacity:
            raise PeerGone(f"corrupt ring: tail {tail} for head {head}")
        unpack = DESCRIPTOR.unpack_from
        records: list[Record] = []
        append = records.append
        while head < tail:
            start = head & mask
            op, flags, size, request_id, offset, length = unpack(data, start)
            if op == _PAD:
                head += capacity - start
                continue
            if size > limit:  # a peer's bad record: never read past the ring or loop on
                raise PeerGone(f"corrupt ring: a record of {size} inline bytes")
            if size:
                append(
                    (
                        op,
                        flags,
                        request_id,
                        offset,
                        length,
                        data[start + _DESC : start + _DESC + size].tobytes(),
                    )
                )
            else:
                append((op, flags, request_id, offset, length, b""))
            head += (_DESC + size + _ALIGN - 1) & _ROUND
        if head != tail:
            raise PeerGone(f"corrupt ring: records end at {head}, the tail is {tail}")
        ring.position = head
        ring.words[_HEAD] = head
        _fence(ring.fence)
        waiting = ring.words[_WAITING]
        if waiting & 1 and waiting != ring.last_rung:
            ring.last_rung = waiting
            self._ring(self.in_bell)
        return records

    def recv(self) -> list[Record]:
        """At least one record, sleeping until the writer rings while the ring is empty.
        PeerGone once the ring is empty and the other side has closed."""
        while True:
            records = self.poll()
            if records:
                return records
            ring = self._in
            ring.words[_SLEEPING] = ring.words[_SLEEPING] + 1  # odd: asleep
            try:
                _fence(ring.fence)
                if ring.words[_TAIL] == ring.position:
                    self._sleep(self.in_bell)
            finally:
                ring.words[_SLEEPING] = ring.words[_SLEEPING] + 1  # even: awake

    # -- doorbells ---------------------------------------------------------------------

    def _ring(self, bell: socket.socket) -> None:
        try:
            bell.send(b"\1", socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass  # bytes already wait there: the peer wakes anyway
        except OSError as exc:
            raise PeerGone(f"the peer closed the channel: {exc}") from None

    def _sleep(self, bell: socket.socket) -> None:
        """One read on ``bell``: returns when rung (all pending bytes taken), after the
        backstop, or raises PeerGone at end of stream."""
        try:
            data = bell.recv(4096)
        except (TimeoutError, BlockingIOError):
            return
        except OSError as exc:
            raise PeerGone(f"the peer closed the channel: {exc}") from None
        if not data:
            raise PeerGone("the peer closed the channel")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for bell in (self.out_bell, self.in_bell):
            with contextlib.suppress(OSError):
                bell.shutdown(socket.SHUT_RDWR)
            bell.close()
        self._out.release()
        self._in.release()
        self._memory.close()


def create(capacity: int = 1 << 16, backstop: float = 0.1) -> tuple[Endpoint, list[int]]:
    """A new channel: this side's endpoint and the three descriptors the other side
    passes to ``attach`` (send them with SCM_RIGHTS or ``pass_fds``, then close them)."""
    if capacity < _PAGE or capacity & (capacity - 1):
        raise ValueError("capacity: a power of two, at least 4096")
    fd = os.memfd_create("ring-channel", os.MFD_CLOEXEC)
    os.ftruncate(fd, _PAGE + 2 * capacity)
    with mmap.mmap(fd, 0) as memory, memoryview(memory).cast("Q") as header:
        header[_CAPACITY_WORD] = capacity
        header[_MAGIC_WORD] = _MAGIC
    ours_out, theirs_in = socket.socketpair()  # ring 0: we write, they read
    ours_in, theirs_out = socket.socketpair()  # ring 1: they write, we read
    peer_memory = os.dup(fd)
    os.set_inheritable(peer_memory, False)
    endpoint = Endpoint(fd, ours_out, ours_in, creator=True, backstop=backstop)
    peer = [peer_memory, theirs_out.detach(), theirs_in.detach()]
    return endpoint, peer


def attach(fds: list[int], backstop: float = 0.1) -> Endpoint:
    """The other side of ``create``, from its three descriptors (taken over: closed
    also when they are not a channel's, ValueError or OSError)."""
    memory_fd, out_fd, in_fd = fds
    bells: list[socket.socket] = []
    try:
        for fd in (out_fd, in_fd):
            bells.append(socket.socket(fileno=fd))
    except OSError:
        for bell in bells:
            bell.close()
        for fd in (memory_fd, *(out_fd, in_fd)[len(bells) :]):
            with contextlib.suppress(OSError):
                os.close(fd)
        raise
    try:
        return Endpoint(memory_fd, bells[0], bells[1], creator=False, backstop=backstop)
    except BaseException:
        for bell in bells:
            bell.close()
        raise


class AsyncEndpoint:
    """An ``Endpoint`` served by an asyncio loop, shaped like ``framing.Channel``:
    ``on_records`` gets every record read at one wake-up, ``on_lost`` is called once when
    the peer goes away. ``send`` never blocks: records written in one loop iteration are
    flushed together, and what does not fit waits here until the reader makes room."""

    def __init__(
        self,
        endpoint: Endpoint,
        on_records: Callable[[list[Record]], None],
        on_lost: Callable[[Exception | None], None],
    ) -> None:
        self.endpoint = endpoint
        self._on_records = on_records
        self._on_lost = on_lost
        self._loop = asyncio.get_running_loop()
        self._pending: list[Outgoing] = []  # sent, not yet in the ring
        self._flush_scheduled = False
        self._waiting_room = False
        self._backstop: asyncio.TimerHandle | None = None
        self.closed = False
        endpoint.in_bell.setblocking(False)
        endpoint.out_bell.setblocking(False)
        self._loop.add_reader(endpoint.in_bell.fileno(), self._on_in_bell)
        self._loop.call_soon(self._drain)
        self._backstop = self._loop.call_later(endpoint.backstop, self._tick)

    def send(
        self,
        op: int,
        request_id: int = 0,
        inline: bytes | bytearray | memoryview = b"",
        offset: int = 0,
        length: int = 0,
        flags: int = 0,
    ) -> None:
        """Queue a record; all queued in this loop iteration are written and flushed
        together (``inline`` is read then: do not change it meanwhile)."""
        if self.closed:
            return
        self._pending.append((op, request_id, inline, offset, length, flags))
        if not self._flush_scheduled and not self._waiting_room:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.closed or self._waiting_room:
            return
        endpoint, pending = self.endpoint, self._pending
        written = endpoint.try_put_many(pending)
        if written == len(pending):
            pending.clear()
        else:
            del pending[:written]
            self._wait_room()
        try:
            endpoint.flush()
        except PeerGone as exc:
            self._lose(exc)

    # -- room in the ring out ----------------------------------------------------------

    def _wait_room(self) -> None:
        """Say that this writer waits (the reader rings ``out_bell`` once it has made
        room), then look once more: the reader may have made room already."""
        self._waiting_room = True
        words = self.endpoint._out.words
        words[_WAITING] += 1  # odd: waiting
        self._loop.add_reader(self.endpoint.out_bell.fileno(), self._on_out_bell)
        _fence(self.endpoint._out.fence)
        self._loop.call_soon(self._move_backlog)

    def _on_out_bell(self) -> None:
        try:
            data = self.endpoint.out_bell.recv(4096)
        except BlockingIOError:
            data = b"\1"
        except OSError as exc:
            self._lose(exc)
            return
        if not data:
            self._lose(PeerGone("the peer closed the channel"))
            return
        self._move_backlog()

    def _move_backlog(self) -> None:
        """Write what fits; while some still waits, announce a fresh wait (a new odd
        WAITING: the reader rings once per value) and look again."""
        if self.closed or not self._waiting_room:
            return
        endpoint, pending = self.endpoint, self._pending
        ring = endpoint._out
        while True:
            written = endpoint.try_put_many(pending)
            del pending[:written]
            try:
                endpoint.flush()
            except PeerGone as exc:
                self._lose(exc)
                return
            if not pending:
                self._waiting_room = False
                ring.words[_WAITING] += 1  # even: not waiting
                self._loop.remove_reader(endpoint.out_bell.fileno())
                return
            if not written:
                return  # the reader rings when it makes room
            ring.words[_WAITING] += 2  # still waiting, a fresh value
            _fence(ring.fence)

    # -- the ring in -------------------------------------------------------------------

    def _on_in_bell(self) -> None:
        try:
            data = self.endpoint.in_bell.recv(4096)
        except BlockingIOError:
            data = b"\1"
        except OSError as exc:
            data = b""
            lost: Exception | None = exc
        else:
            lost = None
        self._drain()
        if not data and not self.closed:
            self._lose(lost or PeerGone("the peer closed the channel"))

    def _drain(self) -> None:
        """Read until the ring is empty, then say this side sleeps and look once more."""
        if self.closed:
            return
        endpoint, ring = self.endpoint, self.endpoint._in
        words = ring.words
        if words[_SLEEPING] & 1:
            words[_SLEEPING] += 1  # awake
        while True:
            try:
                records = endpoint.poll()
            except PeerGone as exc:
                self._lose(exc)
                return
            if records:
                self._on_records(records)
                if self.closed:
                    return
                continue
            words[_SLEEPING] += 1  # asleep
            _fence(ring.fence)
            if words[_TAIL] == ring.position:
                break
            words[_SLEEPING] += 1  # awake: a record came in between

    def _tick(self) -> None:
        """The backstop: a look at the ring every ``backstop`` seconds (a timer per
        wake-up would cost more than the wake-up)."""
        if self.closed:
            return
        if self.endpoint._in.words[_TAIL] != self.endpoint._in.position:
            self._drain()
        self._backstop = self._loop.call_later(self.endpoint.backstop, self._tick)

    def _lose(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.close()
        self._on_lost(exc)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._backstop is not None:
            self._backstop.cancel()
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self.endpoint.in_bell.fileno())
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self.endpoint.out_bell.fileno())
        self.endpoint.close()
