"""The channel between the server and a Python model's worker process.

Messages are pickled tuples ``(tag, ...)`` framed on a Unix stream socket, each wrapped
with the shared-memory bookkeeping of ``shm.py`` (regions the sender released, regions it
dropped). Tensors up to ``inline_limit`` bytes travel inside the message as raw bytes;
larger ones are written once into a shared region whose descriptor, when new, rides with
the message (SCM_RIGHTS), and the receiver gets numpy views of it (no second copy).

Several threads send on one channel (``send`` is locked); exactly one thread per side
receives.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import struct
import threading
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


class ChannelClosed(EOFError):
    """The other side closed the socket (it exited or was killed)."""


class TensorRef(NamedTuple):
    name: str
    kind: str  # numpy dtype string ("<f4"), or "BYTES" (length-prefixed items)
    shape: tuple[int, ...]
    data: bytearray | None  # small tensors travel inside the message
    offset: int  # large ones live in the message's shared region
    nbytes: int


class WireRequest(NamedTuple):
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

    # -- tensors -----------------------------------------------------------------------

    def pack(self, groups: Sequence[Named]) -> Packed:
        refs: list[list[TensorRef]] = []
        large: list[tuple[int, memoryview]] = []
        size = 0
        for group in groups:
            out: list[TensorRef] = []
            for name, array in group:
                shape = tuple(int(d) for d in array.shape)
                if array.dtype == np.object_:
                    data = memoryview(serialize_bytes_tensor(array))
                    kind = "BYTES"
                else:
                    contiguous = np.ascontiguousarray(array)
                    data = contiguous.reshape(-1).view(np.uint8).data
                    kind = contiguous.dtype.str
                if data.nbytes <= self.inline_limit:
                    out.append(TensorRef(name, kind, shape, bytearray(data), 0, data.nbytes))
                    continue
                size = -(-size // _ALIGN) * _ALIGN
                out.append(TensorRef(name, kind, shape, None, size, data.nbytes))
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
        return [[(ref.name, _array(ref, root)) for ref in group] for group in groups]

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
        data, fds, _flags, _addr = socket.recv_fds(self.sock, _HEADER.size, 1)
        if not data:
            raise ChannelClosed("end of stream")
        length, count = _HEADER.unpack(data + self._recv_exact(_HEADER.size - len(data)))
        fd = fds[0] if fds else None
        for extra in fds[1:]:
            os.close(extra)
        try:
            if count and fd is None:
                raise ChannelClosed("a message announced a descriptor that did not arrive")
            released, dropped, message = pickle.loads(self._recv_exact(length))
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        self.pool.release(released)
        self.maps.drop(dropped)
        return message, fd

    def _recv_exact(self, length: int) -> bytearray:
        buffer = bytearray(length)
        view = memoryview(buffer)
        received = 0
        while received < length:
            n = self.sock.recv_into(view[received:])
            if n == 0:
                raise ChannelClosed("end of stream inside a message")
            received += n
        return buffer

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.pool.close()
        self.maps.close()


def _array(ref: TensorRef, root: npt.NDArray[np.uint8] | None) -> Array:
    if ref.data is not None:
        raw: Any = ref.data
    elif root is None:
        raise ValueError(f"tensor '{ref.name}' refers to a missing shared region")
    else:
        raw = root[ref.offset : ref.offset + ref.nbytes]
    if ref.kind == "BYTES":
        count = int(np.prod(ref.shape, dtype=np.int64))
        return deserialize_bytes_tensor(memoryview(raw), count).reshape(ref.shape)
    if ref.data is not None:
        return np.frombuffer(raw, dtype=np.dtype(ref.kind)).reshape(ref.shape)
    return raw.view(np.dtype(ref.kind)).reshape(ref.shape)  # type: ignore[no-any-return]
