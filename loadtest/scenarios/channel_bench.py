"""Every process hop's transport against a bare socketpair and a shared-memory ring.

Each transport carries the same message (an op, a request id and 64 bytes) from this
process to an echo child (``loadtest/channel_peers.py``) and back, with 1, 8 and 64
messages outstanding (a new one is sent for every answer):

- ``socketpair``: the floor, 64-byte writes echoed by ``recv``/``sendall``;
- ``framing``: the frontend/engine channel (``service/channel/framing.py``: pickled
  frames, one per loop iteration, on uvloop at both ends);
- ``worker``: a Python model's worker protocol (``service/backends/python/protocol.py``,
  blocking, one thread each side);
- ``local``: the gateway's local RPC socket (``gateway/local_rpc.py`` calling the
  service's ``LocalRpcServer``; one connection per outstanding call, a thread each, as
  the gateway's handler threads do);
- ``ring``: ``wire/ring.py`` from a plain thread at both ends;
- ``ring-async``: the same rings served by uvloop at both ends (``AsyncEndpoint``);
- ``ring-frames``: ``ring-async`` carrying the framing channel's encoding: one record a
  loop iteration, the pickled list of that iteration's messages.

Per row: round trips per second, wall µs per round trip (at one outstanding, the
latency), CPU µs per message of this process and of the echo child (user + system,
/proc), and wake-ups per message: voluntary context switches of both processes' threads
(each is a thread that went to sleep, so one wake-up later). Rounds alternate the
transports; the table shows each row's median.

    .venv/bin/python -m loadtest channel-bench [--duration 2] [--rounds 2] \\
        [--concurrency 1 8 64] [--kinds ...]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadtest import REPO_ROOT, RESULTS
from loadtest.metrics import process_cpu_seconds
from loadtest.report import fmt, loadavg, median, publish, table
from loadtest.scenario import Scenario, register, window_args
from loadtest.scenarios.worker_channel import calls_in_threads

KINDS = ("socketpair", "framing", "worker", "local", "ring", "ring-async", "ring-frames")
_PAYLOAD = b"x" * 64
_OP = 1


def _own_switches() -> int:
    """Voluntary context switches of this process, threads that ended included (the local
    socket's driver ends a thread per call, whose count ``_switches`` would lose)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


def _switches(pid: int) -> int:
    """Voluntary context switches of every live thread of ``pid`` (the echo side's threads
    live as long as it does)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


class _Driver:
    """The client side of one transport: ``run(n, seconds)`` keeps ``n`` messages
    outstanding for ``seconds``, then waits for the last answers; returns the count."""

    child: subprocess.Popen[bytes]

    def run(self, n: int, seconds: float) -> int:
        raise NotImplementedError

    def close(self) -> None:
        self.child.wait(10)


def _spawn(kind: str, args: list[str], fds: list[int], stdin: int | None = None) -> Any:
    env = dict(os.environ)
    paths = [str(REPO_ROOT), str(REPO_ROOT / "protos")]
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-m", "loadtest.channel_peers", kind, *args],
        pass_fds=fds,
        env=env,
        cwd=REPO_ROOT,
        stdin=stdin,
    )


def _pair_child(kind: str) -> tuple[socket.socket, Any]:
    ours, theirs = socket.socketpair()
    child = _spawn(kind, [str(theirs.fileno())], [theirs.fileno()])
    theirs.close()
    return ours, child


class _Socketpair(_Driver):
    def __init__(self) -> None:
        self.sock, self.child = _pair_child("socketpair")

    def run(self, n: int, seconds: float) -> int:
        sock, size = self.sock, len(_PAYLOAD)
        sock.sendall(_PAYLOAD * n)
        inflight, partial, done = n * size, 0, 0
        deadline = time.perf_counter() + seconds
        while inflight:
            got = len(sock.recv(65536))
            inflight -= got
            partial += got
            whole, partial = divmod(partial, size)
            done += whole
            if whole and time.perf_counter() < deadline:
                sock.sendall(_PAYLOAD * whole)
                inflight += whole * size
        return done

    def close(self) -> None:
        self.sock.close()
        super().close()


class _Worker(_Driver):
    def __init__(self) -> None:
        from service.backends.python.protocol import Channel

        sock, self.child = _pair_child("worker")
        self.channel = Channel(sock)

    def run(self, n: int, seconds: float) -> int:
        channel = self.channel
        for i in range(n):
            channel.send((_OP, i, _PAYLOAD))
        inflight, done, rid = n, 0, n
        deadline = time.perf_counter() + seconds
        while inflight:
            channel.recv()
            inflight -= 1
            done += 1
            if time.perf_counter() < deadline:
                channel.send((_OP, rid, _PAYLOAD))
                rid += 1
                inflight += 1
        return done

    def close(self) -> None:
        self.channel.close()
        super().close()


class _Async(_Driver):
    """A driver whose client runs on its own uvloop, kept across windows."""

    def __init__(self) -> None:
        from service.loop import _loop_factory

        factory = _loop_factory()
        self.loop = factory() if factory is not None else asyncio.new_event_loop()
        self.inflight = self.done = self.rid = 0
        self.stopping = False
        self.finished: asyncio.Future[None] | None = None

    def answered(self, count: int) -> None:
        self.inflight -= count
        self.done += count
        if not self.stopping:
            for _ in range(count):
                self.send(self.rid)
                self.rid += 1
            self.inflight += count
        elif not self.inflight and self.finished is not None and not self.finished.done():
            self.finished.set_result(None)

    def send(self, rid: int) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Nothing: sends in one iteration leave together by themselves."""

    async def _run(self, n: int, seconds: float) -> int:
        loop = asyncio.get_running_loop()
        self.finished = loop.create_future()
        self.stopping, self.done = False, 0
        for _ in range(n):
            self.send(self.rid)
            self.rid += 1
        self.inflight = n

        def stop() -> None:
            self.stopping = True

        loop.call_later(seconds, stop)
        await self.finished
        return self.done

    def run(self, n: int, seconds: float) -> int:
        return self.loop.run_until_complete(self._run(n, seconds))

    def close(self) -> None:
        self.loop.close()
        super().close()


class _Framing(_Async):
    def __init__(self) -> None:
        super().__init__()
        from service.channel.framing import Channel

        sock, self.child = _pair_child("framing")

        async def connect() -> Channel:
            channel = Channel(lambda messages: self.answered(len(messages)), lambda _: None)
            await asyncio.get_running_loop().create_unix_connection(lambda: channel, sock=sock)
            return channel

        self.channel = self.loop.run_until_complete(connect())

    def send(self, rid: int) -> None:
        self.channel.send((_OP, rid, _PAYLOAD))

    def close(self) -> None:
        self.channel.close()
        self.loop.run_until_complete(asyncio.sleep(0))
        super().close()


def _ring_child(kind: str) -> tuple[Any, Any]:
    from wire import ring

    endpoint, fds = ring.create()
    child = _spawn(kind, [str(fd) for fd in fds], fds)
    for fd in fds:
        os.close(fd)
    return endpoint, child


class _Ring(_Driver):
    def __init__(self) -> None:
        self.endpoint, self.child = _ring_child("ring")

    def run(self, n: int, seconds: float) -> int:
        endpoint = self.endpoint
        for i in range(n):
            endpoint.put(_OP, i, _PAYLOAD)
        endpoint.flush()
        inflight, done, rid = n, 0, n
        deadline = time.perf_counter() + seconds
        while inflight:
            records = endpoint.recv()
            inflight -= len(records)
            done += len(records)
            if time.perf_counter() < deadline:
                endpoint.put_many([(_OP, rid + k, _PAYLOAD, 0, 0, 0) for k in range(len(records))])
                rid += len(records)
                inflight += len(records)
                endpoint.flush()
        return done

    def close(self) -> None:
        self.endpoint.close()
        super().close()


class _RingAsync(_Async):
    def __init__(self) -> None:
        super().__init__()
        from wire import ring

        endpoint, self.child = _ring_child("ring-async")

        async def attach() -> ring.AsyncEndpoint:
            return ring.AsyncEndpoint(endpoint, lambda rs: self.answered(len(rs)), lambda _: None)

        self.endpoint = self.loop.run_until_complete(attach())

    def send(self, rid: int) -> None:
        self.endpoint.send(_OP, rid, _PAYLOAD)

    def close(self) -> None:
        self.endpoint.close()
        super().close()


class _RingFrames(_Async):
    """The framing channel's encoding on the rings: what a loop iteration sends leaves
    as one record, a pickled list of messages."""

    def __init__(self) -> None:
        super().__init__()
        import pickle

        from loadtest.channel_peers import FRAME_OP
        from wire import ring

        endpoint, self.child = _ring_child("ring-frames")
        self._out: list[Any] = []
        self._scheduled = False
        self._op, self._dumps, self._loads = FRAME_OP, pickle.dumps, pickle.loads

        def on_records(records: list[ring.Record]) -> None:
            count = 0
            for record in records:
                count += len(self._loads(record[5]))
            self.answered(count)

        async def attach() -> ring.AsyncEndpoint:
            return ring.AsyncEndpoint(endpoint, on_records, lambda _: None)

        self.endpoint = self.loop.run_until_complete(attach())

    def send(self, rid: int) -> None:
        self._out.append((_OP, rid, _PAYLOAD))
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        out, self._out = self._out, []
        self.endpoint.send(self._op, 0, self._dumps(out, protocol=5))

    def close(self) -> None:
        self.endpoint.close()
        super().close()


class _Local(_Driver):
    def __init__(self) -> None:
        from gateway.local_rpc import LocalChannel
        from loadtest.channel_peers import LOCAL_METHOD

        self._folder = tempfile.TemporaryDirectory()
        path = str(Path(self._folder.name) / "local.sock")
        self.child = _spawn("local", [path], [], stdin=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not os.path.exists(path):
            if time.monotonic() > deadline or self.child.poll() is not None:
                raise RuntimeError("the local RPC echo server did not start")
            time.sleep(0.05)
        self.channel = LocalChannel(path)
        self.method = LOCAL_METHOD.encode()

    def run(self, n: int, seconds: float) -> int:
        one = functools.partial(self.channel.call, self.method, [_PAYLOAD], None)
        return calls_in_threads([one] * n, seconds)

    def close(self) -> None:
        self.channel.close()
        assert self.child.stdin is not None
        self.child.stdin.close()
        super().close()
        self._folder.cleanup()


DRIVERS: dict[str, Callable[[], _Driver]] = {
    "socketpair": _Socketpair,
    "framing": _Framing,
    "worker": _Worker,
    "local": _Local,
    "ring": _Ring,
    "ring-async": _RingAsync,
    "ring-frames": _RingFrames,
}


def _window(driver: _Driver, n: int, warmup: float, seconds: float) -> dict[str, float]:
    me, child = os.getpid(), driver.child.pid
    driver.run(n, warmup)
    cpu_me, cpu_child = process_cpu_seconds(me) or 0.0, process_cpu_seconds(child) or 0.0
    switches = _own_switches() + _switches(child)
    start = time.perf_counter()
    count = driver.run(n, seconds)
    wall = time.perf_counter() - start
    count = max(count, 1)
    return {
        "rate": count / wall,
        "wall_us": 1e6 * wall * n / count,
        "client_us": 1e6 * ((process_cpu_seconds(me) or 0.0) - cpu_me) / count,
        "echo_us": 1e6 * ((process_cpu_seconds(child) or 0.0) - cpu_child) / count,
        "wakeups": (_own_switches() + _switches(child) - switches) / count,
    }


@register
class ChannelBench(Scenario):
    """Each process hop's transport and a shared-memory ring: wall, CPU and wake-ups per
    message at 1, 8 and 64 outstanding, against a bare socketpair (issue 37)."""

    name = "channel-bench"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        window_args(parser, 2.0, 0.5, rounds=2, concurrency=[1, 8, 64])
        parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
        parser.add_argument("--out", type=Path, default=RESULTS / "channel_bench.md")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        results: dict[tuple[str, int], list[dict[str, float]]] = {}
        for round_index in range(args.rounds):
            kinds = list(args.kinds) if round_index % 2 == 0 else list(reversed(args.kinds))
            for kind in kinds:
                driver = DRIVERS[kind]()
                try:
                    for n in args.concurrency:
                        figures = _window(driver, n, args.warmup, args.duration)
                        results.setdefault((kind, n), []).append(figures)
                        print(kind, n, {k: round(v, 2) for k, v in figures.items()}, flush=True)
                finally:
                    driver.close()
        publish(_report(args, results), args.out)
        return 0


def _report(
    args: argparse.Namespace, results: dict[tuple[str, int], list[dict[str, float]]]
) -> str:
    def med(kind: str, n: int, key: str) -> float:
        return median(r[key] for r in results[(kind, n)])

    rows: list[list[object]] = []
    for n in args.concurrency:
        floor = (
            med("socketpair", n, "client_us") + med("socketpair", n, "echo_us")
            if ("socketpair" in args.kinds)
            else None
        )
        for kind in args.kinds:
            total = med(kind, n, "client_us") + med(kind, n, "echo_us")
            rows.append(
                [
                    kind,
                    n,
                    f"{med(kind, n, 'rate'):,.0f}",
                    fmt(med(kind, n, "wall_us"), 1),
                    fmt(med(kind, n, "client_us"), 1),
                    fmt(med(kind, n, "echo_us"), 1),
                    fmt(total, 1),
                    fmt(total / floor, 2) if floor else "",
                    fmt(med(kind, n, "wakeups"), 2),
                ]
            )
    lines = [
        "# Every hop's transport against a socketpair and a shared-memory ring",
        "",
        f"Command: `.venv/bin/python -m loadtest {' '.join(sys.argv[1:])}`  ",
        f"{os.cpu_count()} CPUs; load average {loadavg()} at the end; {args.duration:g} s "
        f"windows after {args.warmup:g} s of warm-up; median of {args.rounds} rounds, "
        "rounds alternating the order.",
        "",
        "A message: an op, a request id and 64 bytes, echoed. `wall µs` is the window over "
        "the round trips times the outstanding count (at 1, the round trip's latency); CPU "
        "µs per message of this process (client) and the echo child, user + system; "
        "`x floor`: their sum over the socketpair's at the same outstanding count; "
        "wake-ups: voluntary context switches of both processes per message.",
        "",
        *table(
            [
                "transport",
                "outstanding",
                "round trips/s",
                "wall µs",
                "client CPU µs",
                "echo CPU µs",
                "CPU µs per message",
                "x floor",
                "wake-ups per message",
            ],
            rows,
            "lrrrrrrrr",
        ),
    ]
    return "\n".join(lines) + "\n"
