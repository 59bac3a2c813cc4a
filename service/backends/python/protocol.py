"""The channel between the server and a Python model's worker process.

Messages are pickled tuples ``(tag, ...)`` framed on a Unix stream socket, each wrapped
with the shared-memory bookkeeping of ``shm.py`` (regions the sender released, regions it
dropped). Tensors up to ``inline_limit`` bytes travel inside the message as raw bytes;
larger ones are written once into a shared region whose descriptor, when new, rides with
the message (SCM_RIGHTS), and the receiver gets numpy views of it (no second copy).

Several threads send on one channel (``send`` is locked); exactly one thread per side
receives. A worker has two channels over one pool of regions (``sibling``): the calls
link, read directly by the thread that waits for the answer (the instance's thread here,
the worker's main thread there), and the services link for everything else (BLS,
cancellation queries, a decoupled model's responses), read by a reader thread on each
side. The answer to an ``execute`` thus wakes the one thread that needs it, not a reader
that wakes it in turn (docs/decisions/060-python-model-calls-link.md).

A read takes whatever the socket holds (up to 64 KiB, into a buffer kept for the next),
so a small message costs one ``recvmsg``; descriptors that arrive with the bytes are
queued and handed to the messages whose headers announce one, in order (a descriptor
travels with its message's header). A reader that must look at something else now and
then (is the worker's process still there?) reads with ``recv_within``: the same one
system call, bounded by the socket's receive timeout, not a ``select`` before each read.
"""

from __future__ import annotations

import collections
import contextlib
import os
import pickle
import socket
import struct
import threading
from array import array as _int_array
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from wire.datatypes import Array, deserialize_bytes_tensor, serialize_bytes_tensor

from .shm import DEFAULT_POOL_BYTES, MIN_REGION, RegionInfo, RegionMaps, RegionPool

__all__ = [
    "DEFAULT_INLINE_LIMIT",
    "Channel",
    "ChannelClosed",
    "Packed",
    "TensorRef",
    "WireRequest",
]

Named = Sequence[tuple[str, Array]]

DEFAULT_INLINE_LIMIT = 64 * 1024
_HEADER = struct.Struct("<IB")  # payload length, number of descriptors (0 or 1)
_ALIGN = 64
_READ_BYTES = 64 * 1024
# Plain ints: socket's constants are enum members, and ``flags & MSG_CTRUNC`` on one
# runs Flag.__and__ in Python on every read.
_CTRUNC, _SOL_SOCKET, _SCM_RIGHTS = (
    int(c) for c in (socket.MSG_CTRUNC, socket.SOL_SOCKET, socket.SCM_RIGHTS)
)
_ANCILLARY = socket.CMSG_SPACE(4 * _int_array("i").itemsize)  # fds one read may bring
_LONGEST_WAIT_MS = 1000  # recv_within's bound when none is given, and its largest
_TIMEVAL = struct.Struct("@ll")  # a ``struct timeval``, for SO_RCVTIMEO


def _fds(data: bytes) -> list[int]:
    fds = _int_array("i")
    fds.frombytes(data)
    return list(fds)


class ChannelClosed(EOFError):
    """The other side closed the socket (it exited or was killed)."""


# Messages hold plain tuples, never NamedTuples: pickling a NamedTuple looks its class up
# by name and costs about six times as much (7.6 against 1.3 µs for an execute message).
#: A tensor: (name, kind, shape, data, offset, nbytes). ``kind``: a numpy dtype string
#: ("<f4") or "BYTES" (length-prefixed items); ``data``: the bytes of a small tensor, else
#: None and the tensor is ``nbytes`` at ``offset`` in the message's shared region.
TensorRef = tuple[str, str, tuple[int, ...], bytearray | None, int, int]


class WireRequest(NamedTuple):
    """A request as the worker reads it; it travels as ``tuple(request)``."""

    inputs: list[TensorRef]
    request_id: str
    correlation_id: int | str
    flags: int
    requested_outputs: list[str]
    parameters: str  # JSON, as pb_utils.InferenceRequest.parameters() returns it
    timeout: int  # microseconds, as pb_utils.InferenceRequest.timeout() returns it
    trace: str  # the request's trace context ("" untraced): request.trace().get_context()


class Packed(NamedTuple):
    refs: list[list[TensorRef]]
    region: RegionInfo | None
    fd: int | None  # send with the message, then close


class Channel:
    """Framed pickles, at most one descriptor per message, tensors in shared regions."""

    def __init__(
        self,
        sock: socket.socket,
        inline_limit: int = DEFAULT_INLINE_LIMIT,
        pool_bytes: int = DEFAULT_POOL_BYTES,
        smallest: int = MIN_REGION,
        growth: int = 0,
    ) -> None:
        self.sock = sock
        self.inline_limit = inline_limit
        self.pool = RegionPool(pool_bytes, smallest, growth)
        self.maps = RegionMaps()
        self._send_lock = threading.Lock()
        self._buffer = bytearray(_READ_BYTES)  # [_start, _end): read, not yet handed out
        self._start = self._end = 0
        self._fds: collections.deque[int] = collections.deque()  # not yet handed out
        self._receive_timeout_ms = 0  # the socket's SO_RCVTIMEO (0: none set)

    def sibling(self, sock: socket.socket) -> Channel:
        """A second link to the same peer over the same regions: what one link sends
        into a region the other may release, so both share the pool and the mappings."""
        other = Channel(sock, self.inline_limit)
        other.pool, other.maps = self.pool, self.maps  # its own (empty) ones unused
        return other

    def pending(self) -> bool:
        """A whole message is already buffered: ``recv`` returns without reading."""
        available = self._end - self._start
        if available < _HEADER.size:
            return False
        length: int = _HEADER.unpack_from(self._buffer, self._start)[0]
        return available >= _HEADER.size + length

    # -- tensors -----------------------------------------------------------------------

    def pack(self, groups: Sequence[Named]) -> Packed:
        refs: list[list[TensorRef]] = []
        large: list[tuple[int, memoryview]] = []
        size = 0
        for group in groups:
            out: list[TensorRef] = []
            for name, array in group:
                shape = array.shape  # a tuple of ints already
                dtype = array.dtype
                if dtype.kind == "O":  # ``dtype == np.object_`` builds a dtype each time
                    data = memoryview(serialize_bytes_tensor(array))
                    kind = "BYTES"
                elif array.nbytes <= self.inline_limit:  # bytearray() copies in C order
                    out.append((name, dtype.str, shape, bytearray(array), 0, array.nbytes))
                    continue
                else:
                    contiguous = np.ascontiguousarray(array)
                    data = contiguous.reshape(-1).view(np.uint8).data
                    kind = contiguous.dtype.str
                if data.nbytes <= self.inline_limit:
                    out.append((name, kind, shape, bytearray(data), 0, data.nbytes))
                    continue
                size = -(-size // _ALIGN) * _ALIGN
                out.append((name, kind, shape, None, size, data.nbytes))
                large.append((size, data))
                size += data.nbytes
            refs.append(out)
        if not large:
            return Packed(refs, None, None)
        lease = self.pool.acquire(size)
        try:
            for offset, data in large:
                lease.memory[offset : offset + data.nbytes] = data
        except BaseException:
            if lease.fd is not None:
                os.close(lease.fd)
            raise
        finally:
            if lease.one_shot:
                lease.memory.close()
        return Packed(refs, lease.info, lease.fd)

    def unpack(
        self, groups: Sequence[Sequence[TensorRef]], region: RegionInfo | None, fd: int | None
    ) -> list[list[tuple[str, Array]]]:
        root = self.maps.root(region, fd) if region is not None else None
        if region is None and fd is not None:
            os.close(fd)
        return [[(ref[0], _array(*ref, root)) for ref in group] for group in groups]

    # -- framing -----------------------------------------------------------------------

    def send(self, message: tuple[Any, ...], fd: int | None = None) -> None:
        with self._send_lock:
            envelope = (self.maps.take_released(), self.pool.take_dropped(), message)
            payload = pickle.dumps(envelope, protocol=pickle.HIGHEST_PROTOCOL)
            header = _HEADER.pack(len(payload), 0 if fd is None else 1)
            if fd is None:
                self.sock.sendall(header + payload)
            else:
                socket.send_fds(self.sock, [header], [fd])
                self.sock.sendall(payload)

    def recv(self) -> tuple[tuple[Any, ...], int | None]:
        """Blocking; raises ChannelClosed at end of stream."""
        while True:
            start, available = self._start, self._end - self._start
            if available >= _HEADER.size:
                length, count = _HEADER.unpack_from(self._buffer, start)
                end = start + _HEADER.size + length
                if end <= self._end:
                    break
                self._read_more(_HEADER.size + length)
            else:
                self._read_more(_HEADER.size)
        fd = None
        if count:
            if not self._fds:
                raise ChannelClosed("a message announced a descriptor that did not arrive")
            fd = self._fds.popleft()
        try:
            with memoryview(self._buffer) as view:
                released, dropped, message = pickle.loads(view[start + _HEADER.size : end])
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        finally:
            self._start = end
            if end == self._end:
                self._start = self._end = 0
        if released:  # both are empty but after a region changed hands
            self.pool.release(released)
        if dropped:
            self.maps.drop(dropped)
        return message, fd

    def recv_within(self, timeout: float | None) -> tuple[tuple[Any, ...], int | None] | None:
        """The next message, or None once ``timeout`` seconds (None: a second; never more
        than a second) passed without one, so that the caller can look whether the peer
        still lives: a peer that forked keeps its end open in the children after it died.
        Raises ChannelClosed (or OSError) once the peer is gone or the link closed.

        One system call per message: a blocking read bounded by the socket's receive
        timeout (``SO_RCVTIMEO``, set only when the bound changes), where a ``select``
        before each read made two. What a timed-out read left of a message stays
        buffered for the next. For a socket left blocking (no ``settimeout``)."""
        if self.sock.fileno() < 0:
            raise ChannelClosed("the channel is closed")
        if timeout is None:
            ms = _LONGEST_WAIT_MS
        else:  # a millisecond more: never back before the bound asked for
            ms = max(1, min(int(timeout * 1000) + 1, _LONGEST_WAIT_MS))
        if ms != self._receive_timeout_ms:
            timeval = _TIMEVAL.pack(ms // 1000, ms % 1000 * 1000)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
            self._receive_timeout_ms = ms
        try:
            return self.recv()  # a whole message already buffered: no read at all
        except BlockingIOError:  # the receive timeout ran out
            return None

    def _read_more(self, whole: int) -> None:
        """One ``recvmsg`` of what the socket holds into the buffer's free tail, after
        making room for a message of ``whole`` bytes that starts at ``_start``."""
        buffer, start, end = self._buffer, self._start, self._end
        if start + whole > len(buffer):  # move the partial message to the front
            if whole > len(buffer):
                grown = bytearray(max(whole, 2 * len(buffer)))
                grown[: end - start] = buffer[start:end]
                self._buffer = buffer = grown
            else:
                buffer[: end - start] = buffer[start:end]
            self._start, self._end = 0, end - start
            end = self._end
        with memoryview(buffer) as view:
            n, ancillary, flags, _ = self.sock.recvmsg_into([view[end:]], _ANCILLARY)
        for level, kind, data in ancillary:
            if level == _SOL_SOCKET and kind == _SCM_RIGHTS:
                usable = len(data) - len(data) % _int_array("i").itemsize
                self._fds.extend(_fds(data[:usable]))
        if flags & _CTRUNC:
            raise ChannelClosed("descriptors were lost in transit (MSG_CTRUNC)")
        if n == 0:
            inside = " inside a message" if end > self._start else ""
            raise ChannelClosed(f"end of stream{inside}")
        self._end = end + n

    def shutdown(self) -> None:
        """Wake whoever reads this link (it sees the end of the stream); nothing closes:
        a thread still inside a read must not find its descriptor reused meanwhile."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def close_link(self) -> None:
        """Close this link (its socket, the descriptors it received and did not hand
        out), not the regions it shares with its sibling (``sibling``)."""
        self.shutdown()
        self.sock.close()
        while self._fds:
            with contextlib.suppress(OSError):
                os.close(self._fds.popleft())

    def close(self) -> None:
        """Close the link and the shared regions (the last of the siblings to close)."""
        self.close_link()
        self.pool.close()
        self.maps.close()


def _array(
    name: str,
    kind: str,
    shape: tuple[int, ...],
    data: bytearray | None,
    offset: int,
    nbytes: int,
    root: npt.NDArray[np.uint8] | None,
) -> Array:
    if data is not None:
        raw: Any = data
    elif root is None:
        raise ValueError(f"tensor '{name}' refers to a missing shared region")
    else:
        raw = root[offset : offset + nbytes]
    if kind == "BYTES":
        count = int(np.prod(shape, dtype=np.int64))
        return deserialize_bytes_tensor(memoryview(raw), count).reshape(shape)
    dtype = _DTYPES.get(kind)
    if dtype is None:
        dtype = _DTYPES[kind] = np.dtype(kind)
    if data is not None:
        return np.frombuffer(raw, dtype=dtype).reshape(shape)
    return raw.view(dtype).reshape(shape)  # type: ignore[no-any-return]


#: numpy dtypes by their wire string ("<f4"): ``np.dtype(kind)`` parses it each time.
_DTYPES: dict[str, np.dtype[Any]] = {}
