"""The engine's handle on a tensor instance that executes in a worker process of its own.

``IsolatedInstance.execute`` is called by the instance's thread in the engine, as any
``ModelInstance``'s is: it writes the merged inputs into the shared region, sends one
message and blocks (without the GIL) until the worker answers with its outputs' region.
So the engine's interpreter never runs the model, and ONNX Runtime's threads never
contend for the engine's GIL.

The engine's loop can also start a batch itself (``begin``, for ``InstancePool``'s remote
pools): it sends the batch and reads the answer when the worker's socket becomes
readable, so no thread stands between the loop and the worker (decision 030).

A worker that dies fails the batch it was running, with an error naming the model, the
instance and how the worker ended; the next batch starts a new worker (re-opening the
model) and runs there. A batch that finds the worker already gone (between batches) is
not failed: it runs on the new worker. When the new worker cannot open the model, batches
fail fast for ``RESTART_BACKOFF`` seconds, then it is tried again. The sequences'
implicit state a worker held (``execute_holding_state``) dies with it: the sequence
batcher fails their next requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from inference import model_config_pb2 as mc

from ... import errors
from ...repository.completion import ModelSignature
from ..base import Answer, Array, HeldRows, InstanceSpec, SequenceRows, TimedOutputs
from ..python.protocol import DEFAULT_INLINE_LIMIT, Channel, ChannelClosed
from ..python.shm import DEFAULT_POOL_BYTES
from ..spawn import describe_exit, spawn_worker

__all__ = ["RESTART_BACKOFF", "IsolatedInstance"]

log = logging.getLogger(__name__)

#: Seconds a failed restart makes batches fail fast before the next try.
RESTART_BACKOFF = 1.0
#: Seconds a worker may take to start and open its model.
OPEN_TIMEOUT = 300.0
#: Seconds a worker may take to close its instance when the model unloads.
CLOSE_TIMEOUT = 10.0


class _Worker:
    """One worker process and its channel; its reaper thread notes when it ends."""

    def __init__(self, label: str) -> None:
        self.process, sock = spawn_worker(
            "service.backends.isolated.host", str(DEFAULT_INLINE_LIMIT), str(DEFAULT_POOL_BYTES)
        )
        self.pid = self.process.pid
        self.channel = Channel(sock, DEFAULT_INLINE_LIMIT, DEFAULT_POOL_BYTES)
        self.ended = ""  # how it ended, once it has
        self.expected = False  # closed by us: no error when it ends
        self._label = label
        threading.Thread(target=self._reap, name=f"reaper-{self.pid}", daemon=True).start()

    def _reap(self) -> None:
        self.ended = describe_exit(self.process.wait())
        if not self.expected:
            log.error(
                "%s: its worker process (pid %d) %s; a new one starts with the next batch",
                self._label,
                self.pid,
                self.ended,
            )

    def call(self, message: tuple[Any, ...], fd: int | None = None) -> tuple[Any, int | None]:
        """Send and wait for the answer. Raises ChannelClosed (or OSError) when the worker
        is gone."""
        self.channel.send(message, fd)
        return self.receive()

    def receive(self) -> tuple[Any, int | None]:
        """The next answer, the worker's log records in it emitted here."""
        reply, reply_fd = self.channel.recv()
        for record in reply[1]:
            logging.getLogger(record.name).handle(record)
        return reply, reply_fd

    def how_it_ended(self) -> str:
        """Wait (briefly) for the reaper: a closed socket and the exit come together."""
        try:
            self.process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.kill()
        return self.ended or describe_exit(self.process.wait())

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()

    def close(self, timeout: float) -> None:
        self.expected = True
        try:
            self.channel.sock.settimeout(timeout)
            self.call(("close",))
            self.process.wait(timeout=timeout)
        except (ChannelClosed, OSError, subprocess.TimeoutExpired):
            log.warning(
                "%s: worker %d did not close in %g s; killing it", self._label, self.pid, timeout
            )
        self.kill()
        self.channel.close()


class _NotTaken(Exception):
    """The worker was gone before a batch reached it."""


def _error_of(reply: tuple[Any, ...]) -> errors.ServerError:
    """The error the worker reported, as the class it had (Internal otherwise)."""
    _, _, name, message, failure = reply
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, errors.ServerError):
        return cls(message, failure=failure)
    return errors.Internal(message)


def _outputs(worker: _Worker, reply: tuple[Any, ...], fd: int | None) -> TimedOutputs:
    """A ``done`` answer's outputs (views of the worker's region) and run times."""
    _, _, refs, region, start, end = reply[:6]
    (results,) = worker.channel.unpack([refs], region, fd)
    return TimedOutputs(dict(results), start, end)


class IsolatedInstance:
    """A ``ModelInstance`` whose model runs in a worker process (see the module doc)."""

    def __init__(
        self, backend: str, config: mc.ModelConfig, version_path: Path, spec: InstanceSpec
    ) -> None:
        self.spec = spec
        self.restarts = 0
        self._label = f"model '{config.name}' instance '{spec.name}'"
        self._open = ("open", backend, config.SerializeToString(), str(version_path), spec)
        self._retry_at = 0.0
        self._unavailable = ""
        self._worker: _Worker | None = None
        self._broken = False  # its channel closed under a batch begun on the loop
        self._signature = self._start()

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker is not None else None

    @property
    def worker_alive(self) -> bool:
        """False once the worker's end was seen (a new one starts with the next batch)."""
        return self._worker is not None and not self._worker.ended

    def _start(self) -> ModelSignature | None:
        """A new worker with the model open in it; ValueError (the backend's own text)
        when it cannot open it."""
        worker = _Worker(self._label)
        try:
            worker.channel.sock.settimeout(OPEN_TIMEOUT)
            reply, _ = worker.call(self._open)
            worker.channel.sock.settimeout(None)
        except (ChannelClosed, OSError) as exc:
            worker.expected = True
            worker.kill()
            worker.channel.close()
            how = worker.ended or str(exc)
            raise ValueError(f"{self._label}: the worker process {how} while loading") from exc
        if reply[0] != "opened":
            worker.close(CLOSE_TIMEOUT)
            raise ValueError(reply[3])
        self._worker = worker
        self._broken = False
        signature: ModelSignature | None = reply[2]
        return signature

    def signature(self) -> ModelSignature | None:
        return self._signature

    def _live_worker(self) -> _Worker:
        """The current worker, or a new one when it has ended (or fail fast while a
        failed restart's back-off lasts)."""
        worker = self._worker
        if worker is not None and not worker.ended and not self._broken:
            return worker
        if time.monotonic() < self._retry_at:
            raise errors.Unavailable(f"{self._label} is unavailable: {self._unavailable}")
        if worker is not None:
            worker.expected = True
            worker.channel.close()
            self._worker = None
        try:
            self._start()
        except ValueError as exc:
            self._unavailable = str(exc)
            self._retry_at = time.monotonic() + RESTART_BACKOFF
            log.error("%s could not be restarted: %s", self._label, exc)
            raise errors.Unavailable(f"{self._label} is unavailable: {exc}") from exc
        self.restarts += 1
        assert self._worker is not None
        log.warning("%s: worker restarted (pid %d)", self._label, self._worker.pid)
        return self._worker

    def execute(self, inputs: Mapping[str, Array], outputs: Sequence[str]) -> dict[str, Array]:
        reply, worker, fd = self._exchange(("execute", list(outputs)), list(inputs.items()))
        return _outputs(worker, reply, fd)

    def execute_holding_state(
        self, inputs: Mapping[str, Array], outputs: Sequence[str], rows: SequenceRows
    ) -> tuple[dict[str, Array], HeldRows]:
        """``StateHolder``: the sequences' implicit state lives in the worker, so only the
        inputs, the requested outputs and the rows' state shapes cross. A worker that
        ended took its states along: their rows come back lost."""
        message = ("execute", list(outputs), rows)
        reply, worker, fd = self._exchange(message, list(inputs.items()))
        held: HeldRows = reply[6]
        return _outputs(worker, reply, fd), held

    def _exchange(
        self, message: tuple[Any, ...], named: list[tuple[str, Array]]
    ) -> tuple[tuple[Any, ...], _Worker, int | None]:
        """Run one batch, on a new worker when the current one is gone; its ``done``
        answer, or the worker's error raised."""
        worker = self._live_worker()
        try:
            reply, fd = self._run(worker, named, message)
        except _NotTaken:  # gone between batches: this one runs on a new worker
            worker.how_it_ended()
            worker = self._live_worker()
            reply, fd = self._run(worker, named, message)
        if reply[0] != "done":
            raise _error_of(reply)
        return reply, worker, fd

    def begin(
        self,
        execution: tuple[Mapping[str, Array], Sequence[str]],
        answer: Answer,
    ) -> bool:
        """On the loop: send one batch; ``answer`` gets its outputs (or error) on the
        loop when the worker's answer arrives. False, with nothing sent, when the worker
        is gone: ``execute`` in the instance's thread then starts a new one."""
        worker = self._worker
        if worker is None or worker.ended or self._broken:
            return False
        inputs, outputs = execution
        packed = worker.channel.pack([list(inputs.items())])
        try:
            worker.channel.send(
                ("execute", packed.refs[0], packed.region, list(outputs)), packed.fd
            )
        except OSError:
            return False
        finally:
            if packed.fd is not None:
                os.close(packed.fd)
        loop = asyncio.get_running_loop()
        fd = worker.channel.sock.fileno()
        loop.add_reader(fd, self._answered, loop, worker, answer)
        # uvloop (libuv's uv_poll_init) makes a polled descriptor non-blocking; the
        # channel reads a message whole once it starts, and the instance's thread reads
        # it too, both blocking.
        os.set_blocking(fd, True)
        return True

    def _answered(
        self,
        loop: asyncio.AbstractEventLoop,
        worker: _Worker,
        answer: Answer,
    ) -> None:
        """The worker's socket is readable: its answer (whole: it sends each at once),
        or its end."""
        loop.remove_reader(worker.channel.sock.fileno())
        try:
            reply, fd = worker.receive()
            if reply[0] != "done":
                answer(None, _error_of(reply))
                return
            results = _outputs(worker, reply, fd)
        except (ChannelClosed, OSError):
            self._broken = True  # the next batch restarts it, in the instance's thread

            def failed(ended: asyncio.Future[str]) -> None:
                error = ended.exception()
                answer(None, self._died(f"ended ({error})" if error else ended.result()))

            # how_it_ended waits for the exit (briefly): not on the loop.
            loop.run_in_executor(None, worker.how_it_ended).add_done_callback(failed)
            return
        except Exception as exc:  # an answer that cannot be read: this worker is done
            self._broken = True
            worker.kill()
            answer(None, errors.Internal(f"{self._label}: unreadable answer: {exc}"))
            return
        answer(results, None)

    def _died(self, how: str) -> errors.Internal:
        return errors.Internal(
            f"{self._label}: the worker process {how} during the execution; a new one "
            "starts with the next batch"
        )

    def _run(
        self, worker: _Worker, named: list[tuple[str, Array]], message: tuple[Any, ...]
    ) -> tuple[tuple[Any, ...], int | None]:
        """One batch there and its answer back: ``message`` is ``("execute", outputs,
        ...)``, sent with the packed inputs after its tag. _NotTaken: the worker was gone
        before the batch reached it; Internal: it ended while running the batch."""
        packed = worker.channel.pack([named])
        tag, *rest = message
        try:
            worker.channel.send((tag, packed.refs[0], packed.region, *rest), packed.fd)
        except OSError as exc:
            raise _NotTaken from exc
        finally:
            if packed.fd is not None:
                os.close(packed.fd)
        try:
            return worker.receive()
        except (ChannelClosed, OSError) as exc:
            raise self._died(worker.how_it_ended()) from exc

    def close(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close(CLOSE_TIMEOUT)
