"""The echo side of ``channel-bench``: one process per transport, answering every message
with the same message, as cheaply as that transport allows.

    python -m loadtest.channel_peers KIND ARG...

KIND: ``socketpair`` FD, ``framing`` FD (``service/channel/framing.py`` on uvloop),
``worker`` FD (``service/backends/python/protocol.py``), ``local`` PATH (the service's
``LocalRpcServer`` with one echo method), ``ring`` MEMFD OUT IN (``wire.ring`` from a
thread), ``ring-async`` MEMFD OUT IN (``wire.ring.AsyncEndpoint`` on uvloop) or
``ring-frames`` MEMFD OUT IN (the same, one record of pickled messages a loop iteration). Each
exits when the parent closes its end.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from typing import Any

#: The op of a record that holds a pickled list of messages (``ring-frames``).
FRAME_OP = 2
#: The echo method's full name on the local socket.
LOCAL_METHOD = "/bench.Echo/Echo"


def _socketpair(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    while data := sock.recv(65536):
        sock.sendall(data)


def _worker(fd: int) -> None:
    from service.backends.python.protocol import Channel, ChannelClosed

    channel = Channel(socket.socket(fileno=fd))
    try:
        while True:
            message, _ = channel.recv()
            channel.send(message)
    except ChannelClosed:
        pass


async def _framing(fd: int) -> None:
    from service.channel.framing import Channel

    loop = asyncio.get_running_loop()
    lost = loop.create_future()
    channel: Channel | None = None

    def on_messages(messages: list[Any]) -> None:
        assert channel is not None
        for message in messages:
            channel.send(message)

    def on_lost(exc: Exception | None) -> None:
        if not lost.done():
            lost.set_result(None)

    def make() -> Channel:
        nonlocal channel
        channel = Channel(on_messages, on_lost)
        return channel

    await loop.create_unix_connection(make, sock=socket.socket(fileno=fd))
    await lost


class _EchoHandler:
    """What the local server needs of a grpc method handler: bytes in, bytes out."""

    @staticmethod
    def request_deserializer(message: memoryview) -> bytes:
        return bytes(message)

    @staticmethod
    def response_serializer(response: bytes) -> bytes:
        return response

    @staticmethod
    async def unary_unary(request: bytes, context: Any) -> bytes:
        return request


async def _local(path: str) -> None:
    from service.grpc_frontend.local_rpc import LocalRpcServer, bind_local_socket

    server = LocalRpcServer({LOCAL_METHOD: _EchoHandler()}, 1 << 20)
    await server.start(bind_local_socket(path))
    # The parent closes stdin when it is done.
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def stdin_closed() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(sys.stdin.fileno(), stdin_closed)
    await done


def _ring(fds: list[int]) -> None:
    from wire import ring

    endpoint = ring.attach(fds)
    try:
        while True:
            endpoint.put_many([(r[0], r[2], r[5], r[3], r[4], r[1]) for r in endpoint.recv()])
            endpoint.flush()
    except ring.PeerGone:
        pass


async def _ring_async(fds: list[int]) -> None:
    from wire import ring

    loop = asyncio.get_running_loop()
    lost = loop.create_future()
    endpoint: ring.AsyncEndpoint | None = None

    def on_records(records: list[ring.Record]) -> None:
        assert endpoint is not None
        for op, flags, request_id, offset, length, inline in records:
            endpoint.send(op, request_id, inline, offset, length, flags)

    def on_lost(exc: Exception | None) -> None:
        if not lost.done():
            lost.set_result(None)

    endpoint = ring.AsyncEndpoint(ring.attach(fds), on_records, on_lost)
    await lost


async def _ring_frames(fds: list[int]) -> None:
    """The framing channel's encoding on the rings: one record per loop iteration
    holding that iteration's messages, pickled together."""
    import pickle

    from wire import ring

    loop = asyncio.get_running_loop()
    lost = loop.create_future()
    endpoint: ring.AsyncEndpoint | None = None

    def on_records(records: list[ring.Record]) -> None:
        assert endpoint is not None
        messages: list[Any] = []
        for record in records:
            messages += pickle.loads(record[5])
        endpoint.send(FRAME_OP, 0, pickle.dumps(messages, protocol=pickle.HIGHEST_PROTOCOL))

    def on_lost(exc: Exception | None) -> None:
        if not lost.done():
            lost.set_result(None)

    endpoint = ring.AsyncEndpoint(ring.attach(fds), on_records, on_lost)
    await lost


def main(argv: list[str]) -> None:
    from service.loop import run

    kind, *rest = argv
    if kind == "socketpair":
        _socketpair(int(rest[0]))
    elif kind == "worker":
        _worker(int(rest[0]))
    elif kind == "framing":
        run(_framing(int(rest[0])))
    elif kind == "local":
        run(_local(rest[0]))
    elif kind == "ring":
        _ring([int(fd) for fd in rest])
    elif kind == "ring-async":
        run(_ring_async([int(fd) for fd in rest]))
    elif kind == "ring-frames":
        run(_ring_frames([int(fd) for fd in rest]))
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
