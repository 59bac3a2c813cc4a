"""Frontend <-> engine channel candidates: CPU per descriptor round trip, both ends.

An echo process answers each request descriptor (a ModelInfer for add_sub as the engine
client encodes it: two [1, 16] FP32 inputs inline) with a response descriptor of the same
size; this process keeps ``--inflight`` of them outstanding. Measured per round trip:
CPU of both processes (/proc), so the machine's other load changes little. Candidates:

* ``unix-batched``: the project's ``channel.framing.Channel`` (asyncio Unix stream
  socket; every message of a loop iteration in one length-prefixed pickle frame);
* ``unix-per-message``: the same socket, one frame and one write per message;
* ``zmq``: pyzmq DEALER/ROUTER over ``ipc://`` with ``zmq.asyncio``, one pickled message
  per descriptor (vLLM's API-server/engine arrangement). Needs ``pip install pyzmq``
  (not a project dependency); skipped when it is missing.

    .venv/bin/python loadtest/channel_bench.py [--messages 100000] [--inflight 64]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from metrics import process_cpu_seconds

from service.channel.framing import Channel

_DATA = bytes(64)
REQUEST = (
    1,
    0,
    ["add_sub", "", "", [["INPUT0", "FP32", (1, 16), _DATA, None, {}]] * 2, [], {}],
    None,
)
RESPONSE = (11, 0, ["add_sub", "1", "", [("OUTPUT0", "FP32", (1, 16), _DATA)] * 2, {}])


# --- echo servers (child process) ---------------------------------------------------------


def _echo_unix(path: str, batched: bool) -> None:
    async def run() -> None:
        done = asyncio.get_running_loop().create_future()

        def connected() -> Channel:
            channel: Channel

            def received(messages: list[Any]) -> None:
                for m in messages:
                    reply = (RESPONSE[0], m[1], *RESPONSE[2:])
                    if batched:
                        channel.send(reply)
                    else:
                        data = pickle.dumps([reply], protocol=5)
                        channel._transport.write(len(data).to_bytes(4, "little") + data)  # type: ignore[union-attr]

            channel = Channel(received, lambda exc: done.set_result(None))
            return channel

        server = await asyncio.get_running_loop().create_unix_server(connected, path)
        await done
        server.close()

    asyncio.run(run())


def _echo_zmq(path: str) -> None:
    import zmq
    import zmq.asyncio

    async def run() -> None:
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.bind(f"ipc://{path}")
        while True:
            ident, data = await sock.recv_multipart()
            m = pickle.loads(data)
            if m is None:
                break
            await sock.send_multipart([ident, pickle.dumps((RESPONSE[0], m[1], *RESPONSE[2:]), 5)])
        ctx.destroy(linger=0)

    asyncio.run(run())


# --- clients (this process) ---------------------------------------------------------------


async def _client_unix(path: str, count: int, inflight: int, batched: bool) -> None:
    loop = asyncio.get_running_loop()
    waiting: dict[int, asyncio.Future[Any]] = {}

    def received(messages: list[Any]) -> None:
        for m in messages:
            waiting.pop(m[1]).set_result(m)

    channel = Channel(received, lambda exc: None)
    await loop.create_unix_connection(lambda: channel, path)

    async def worker(base: int) -> None:
        for i in range(count // inflight):
            rid = base + i * inflight
            future = waiting[rid] = loop.create_future()
            message = (REQUEST[0], rid, *REQUEST[2:])
            if batched:
                channel.send(message)
            else:
                data = pickle.dumps([message], protocol=5)
                channel._transport.write(len(data).to_bytes(4, "little") + data)  # type: ignore[union-attr]
            await future

    await asyncio.gather(*(worker(k) for k in range(inflight)))
    channel.close()


async def _client_zmq(path: str, count: int, inflight: int) -> None:
    import zmq
    import zmq.asyncio

    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(f"ipc://{path}")
    loop = asyncio.get_running_loop()
    waiting: dict[int, asyncio.Future[Any]] = {}

    async def reader() -> None:
        while True:
            m = pickle.loads(await sock.recv())
            waiting.pop(m[1]).set_result(m)

    async def worker(base: int) -> None:
        for i in range(count // inflight):
            rid = base + i * inflight
            future = waiting[rid] = loop.create_future()
            await sock.send(pickle.dumps((REQUEST[0], rid, *REQUEST[2:]), 5))
            await future

    read = asyncio.create_task(reader())
    await asyncio.gather(*(worker(k) for k in range(inflight)))
    await sock.send(pickle.dumps(None))
    read.cancel()
    ctx.destroy(linger=100)


def measure(kind: str, count: int, inflight: int) -> tuple[float, float, float]:
    """(µs CPU per round trip: client, echo; round trips per second)."""
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "sock")
    ctx = multiprocessing.get_context("spawn")
    if kind == "zmq":
        echo = ctx.Process(target=_echo_zmq, args=(path,))
    else:
        echo = ctx.Process(target=_echo_unix, args=(path, kind == "unix-batched"))
    echo.start()
    for _ in range(200):
        if os.path.exists(path):
            break
        time.sleep(0.02)
    time.sleep(0.2)
    cpu0 = process_cpu_seconds(echo.pid or 0) or 0.0
    self0 = time.process_time()
    start = time.perf_counter()
    if kind == "zmq":
        asyncio.run(_client_zmq(path, count, inflight))
    else:
        asyncio.run(_client_unix(path, count, inflight, kind == "unix-batched"))
    wall = time.perf_counter() - start
    client = time.process_time() - self0
    server = (process_cpu_seconds(echo.pid or 0) or 0.0) - cpu0
    echo.join(10)
    if echo.is_alive():
        echo.kill()
    return 1e6 * client / count, 1e6 * server / count, count / wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    kinds = ["unix-batched", "unix-per-message"]
    try:
        import zmq  # noqa: F401

        kinds.append("zmq")
    except ImportError:
        print("pyzmq not installed: zmq skipped")
    results: dict[str, list[tuple[float, float, float]]] = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            results[kind].append(measure(kind, args.messages, args.inflight))
    print(
        f"channel_bench: {args.messages} round trips, {args.inflight} in flight, best of "
        f"{args.rounds}"
    )
    print("| channel | client µs/rt | echo µs/rt | total µs/rt | round trips/s |")
    print("|---|---:|---:|---:|---:|")
    for kind, rows in results.items():
        c, s, r = min(rows, key=lambda row: row[0] + row[1])
        print(f"| {kind} | {c:.1f} | {s:.1f} | {c + s:.1f} | {r:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
