"""``wire.ring``, the shared-memory channel, between two real processes: order across
many wrap-arounds, a full ring holding its writer back, a sleeping reader woken by its
doorbell (not by the backstop), a dead peer seen by a reader and by a blocked writer,
and the asyncio endpoint over a ring too small for what it sends."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import wire
from wire import ring

pytestmark = pytest.mark.skipif(not ring.SUPPORTED, reason="the ring needs x86-64")

_PROTOS = str(Path(wire.__file__).parent.parent)
#: Long enough that only a doorbell can wake a sleeper within a test's wait.
_NO_BACKSTOP = 120.0
_WAIT = 60.0

# The other process: attaches, then (``echo``) sends every record back as it came, or
# (``gated``) first waits for a line on stdin.
_PEER = """
import sys
from wire import ring
mode, backstop, *fds = sys.argv[1:]
endpoint = ring.attach([int(fd) for fd in fds], backstop=float(backstop))
if mode == "gated":
    sys.stdin.readline()
try:
    while True:
        records = endpoint.recv()
        endpoint.put_many([(r[0], r[2], r[5], r[3], r[4], r[1]) for r in records])
        endpoint.flush()
except ring.PeerGone:
    sys.exit(0)
"""


class Peer:
    def __init__(self, mode: str, capacity: int = 4096, backstop: float = _NO_BACKSTOP) -> None:
        self.endpoint, fds = ring.create(capacity, backstop=backstop)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([_PROTOS, *sys.path])}
        self.process = subprocess.Popen(
            [sys.executable, "-c", _PEER, mode, str(_NO_BACKSTOP), *map(str, fds)],
            pass_fds=fds,
            env=env,
            stdin=subprocess.PIPE,
        )
        for fd in fds:
            os.close(fd)

    def release_gate(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"go\n")
        self.process.stdin.flush()

    def close(self) -> None:
        self.endpoint.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(_WAIT)
        assert self.process.stdin is not None
        self.process.stdin.close()


@pytest.fixture
def peers() -> Iterator[Callable[..., Peer]]:
    made: list[Peer] = []

    def make(mode: str = "echo", **kwargs: float) -> Peer:
        made.append(Peer(mode, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for peer in made:
        peer.close()


def _payload(i: int) -> bytes:
    return bytes([i % 251]) * (i * 37 % 700)


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + _WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.001)


def _receive(endpoint: ring.Endpoint, count: int) -> list[ring.Record]:
    got: list[ring.Record] = []
    while len(got) < count:
        got += endpoint.recv()
    return got


def test_records_come_back_in_order_across_wrap_arounds(peers: Callable[..., Peer]) -> None:
    """3,000 records of 0-700 inline bytes, in batches of 1-40, through a 4 KiB ring:
    about 300 times round it, every field as written. One thread writes while this one
    reads (both rings fill, and each writer waits for its reader)."""
    endpoint = peers().endpoint
    sent = 3000

    def write() -> None:
        start = 0
        while start < sent:
            end = min(sent, start + start % 40 + 1)
            endpoint.put_many([(7, i, _payload(i), i * 3, i * 5, i % 4) for i in range(start, end)])
            endpoint.flush()
            start = end

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    received = _receive(endpoint, sent)
    writer.join(_WAIT)
    assert [r[2] for r in received] == list(range(sent))
    for op, flags, request_id, offset, length, inline in received:
        assert (op, flags, offset, length) == (7, request_id % 4, request_id * 3, request_id * 5)
        assert inline == _payload(request_id)


def test_a_full_ring_holds_the_writer_until_the_reader_makes_room(
    peers: Callable[..., Peer],
) -> None:
    peer = peers("gated")
    endpoint = peer.endpoint
    written = 0
    while endpoint.try_put(1, written, b"x" * 100):
        written += 1
    endpoint.flush()
    assert 0 < written < 4096 // 100  # the ring, not the test, stopped it
    done = threading.Event()

    def blocked_send() -> None:
        endpoint.send(1, written, b"y" * 100)
        done.set()

    writer = threading.Thread(target=blocked_send, daemon=True)
    writer.start()
    # The writer said it waits for room: it is asleep on its doorbell, not done.
    _wait_for(lambda: endpoint._out.words[1] % 2 == 1, "the writer waits for room")
    assert not done.is_set()
    peer.release_gate()
    records = _receive(endpoint, written + 1)
    writer.join(_WAIT)
    assert done.is_set()
    assert [r[2] for r in records] == list(range(written + 1))
    assert records[-1][5] == b"y" * 100


def test_a_sleeping_reader_is_woken_by_its_doorbell(peers: Callable[..., Peer]) -> None:
    """The peer's backstop is two minutes: an answer within the wait came by the bell."""
    endpoint = peers().endpoint
    for i in range(3):
        # The peer's reader says it sleeps (its SLEEPING word odd) before we write.
        _wait_for(lambda: endpoint._out.words[9] % 2 == 1, "the peer sleeps")
        endpoint.send(3, i, b"wake")
        assert _receive(endpoint, 1) == [(3, 0, i, 0, 0, b"wake")]


def test_a_dead_peer_is_seen_by_a_sleeping_reader(peers: Callable[..., Peer]) -> None:
    peer = peers()
    endpoint = peer.endpoint
    endpoint.send(1, 1, b"last")
    assert _receive(endpoint, 1)[0][5] == b"last"
    peer.process.kill()
    with pytest.raises(ring.PeerGone):
        while True:
            endpoint.recv()


def test_a_dead_peer_is_seen_by_a_writer_waiting_for_room(peers: Callable[..., Peer]) -> None:
    peer = peers("gated")
    endpoint = peer.endpoint
    while endpoint.try_put(1, 0, b"x" * 100):
        pass
    endpoint.flush()
    failure: list[BaseException] = []

    def blocked_send() -> None:
        try:
            endpoint.send(1, 0, b"x" * 100)
        except ring.PeerGone as exc:
            failure.append(exc)

    writer = threading.Thread(target=blocked_send, daemon=True)
    writer.start()
    _wait_for(lambda: endpoint._out.words[1] % 2 == 1, "the writer waits for room")
    peer.process.kill()
    writer.join(_WAIT)
    assert not writer.is_alive()
    assert len(failure) == 1


def test_the_asyncio_endpoint_sends_more_than_the_ring_holds(peers: Callable[..., Peer]) -> None:
    """2,000 records sent in one loop iteration through a 4 KiB ring: the rest waits in
    the endpoint until the peer makes room; then the peer dies and ``on_lost`` says so."""
    peer = peers()

    async def main() -> tuple[list[int], Exception | None]:
        loop = asyncio.get_running_loop()
        got: list[int] = []
        lost: asyncio.Future[Exception | None] = loop.create_future()
        all_back = loop.create_future()

        def on_records(records: list[ring.Record]) -> None:
            for record in records:
                assert record[5] == _payload(record[2])
                got.append(record[2])
            if len(got) == 2000 and not all_back.done():
                all_back.set_result(None)

        def on_lost(exc: Exception | None) -> None:
            lost.set_result(exc)

        channel = ring.AsyncEndpoint(peer.endpoint, on_records, on_lost)
        for i in range(2000):
            channel.send(5, i, _payload(i))
        await asyncio.wait_for(all_back, _WAIT)
        peer.process.kill()
        return got, await asyncio.wait_for(lost, _WAIT)

    got, exc = asyncio.run(main())
    assert got == list(range(2000))
    assert isinstance(exc, ring.PeerGone)


def test_what_the_ring_refuses() -> None:
    with pytest.raises(ValueError, match="power of two"):
        ring.create(5000)
    endpoint, fds = ring.create(4096)
    other = ring.attach(fds)
    try:
        with pytest.raises(ValueError, match="use the arena"):
            endpoint.try_put(1, 0, b"x" * (endpoint.max_inline + 1))
    finally:
        other.close()
        endpoint.close()


def test_a_peers_bad_positions_and_sizes_are_refused_not_followed() -> None:
    """Decision 071: the ring's other side is another process; a record longer than a
    record may be, or a tail beyond what the ring holds, ends the channel (PeerGone)
    instead of reading past the ring or looping on garbage."""
    endpoint, fds = ring.create(4096)
    other = ring.attach(fds)
    try:
        endpoint.send(1, 7, b"fine")
        assert other.poll() == [(1, 0, 7, 0, 0, b"fine")]
        out = endpoint._out
        ring.DESCRIPTOR.pack_into(out.data, 64, 1, 0, 1 << 30, 8, 0, 0)  # 1 GiB inline
        out.words[0] = 96  # the tail: one descriptor past the first record (64 bytes)
        with pytest.raises(ring.PeerGone, match="inline bytes"):
            other.poll()
        out.words[0] = 64 + 4096 * 4  # more than the ring holds past the reader's head
        with pytest.raises(ring.PeerGone, match="corrupt ring"):
            other.poll()
    finally:
        other.close()
        endpoint.close()


def test_memory_that_is_not_a_rings_is_refused_and_every_descriptor_closed() -> None:
    read_end, write_end = os.pipe()
    left, right = socket.socketpair()
    fds = [read_end, left.detach(), right.detach()]
    with pytest.raises(OSError):
        ring.attach(fds)  # a pipe cannot be mapped
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)  # closed, even so
    os.close(write_end)
    endpoint, fds = ring.create(4096)
    memory = os.memfd_create("small")
    os.ftruncate(memory, 4096 * 2)  # smaller than the rings its header claims
    os.pwrite(memory, os.pread(fds[0], 4096, 0), 0)
    os.close(fds[0])
    with pytest.raises(ValueError, match="smaller than its rings"):
        ring.attach([memory, fds[1], fds[2]])
    for fd in (memory, fds[1], fds[2]):
        with pytest.raises(OSError):
            os.fstat(fd)
    endpoint.close()
