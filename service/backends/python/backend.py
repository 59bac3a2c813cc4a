"""``backend: "python"``: each instance is a worker process running the model's ``model.py``.

``PythonInstance.execute_requests`` runs in the instance's scheduler thread: it ships the
requests to the worker on the calls link and, for a model that is not decoupled, reads
the answer there itself, forwarding each response to its request's ``ResponseSender``
(one thread wake-up per execute on this side). A decoupled model's responses come on the
services link, which the worker's reader thread reads, as they may keep coming after
``execute`` returned. A worker that crashes, or whose ``execute`` outlives
``execute_timeout_secs``, is killed if need be, every request it still owed gets an error
naming the model, and a fresh worker is started and initialised in its place.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, cast

from inference import model_config_pb2 as mc

from ...errors import (
    AlreadyExists,
    Cancelled,
    Internal,
    InvalidArgument,
    NotFound,
    ServerError,
    Unavailable,
    Unimplemented,
    Unknown,
    status_text,
)
from ...repository.completion import ModelSignature
from ...telemetry.custom_metrics import CUSTOM_METRICS
from ..backend_config import current
from ..base import BackendRequest, InstanceSpec, ResponseSender
from ..builtin.common import config_signature
from .bls import serve_bls
from .config_json import apply_completed, config_to_json
from .execution_env import execution_env, launcher
from .metric_calls import serve_metric
from .model_control import serve_control
from .protocol import ChannelClosed
from .settings import RESTART_BACKOFF, Settings
from .worker import ModelRaised, WorkerProcess

__all__ = ["PythonBackend", "PythonInstance"]

log = logging.getLogger(__name__)


class PythonBackend:
    name = "python"
    supports_gpu = True  # the model decides what runs where (model_instance_kind "GPU")
    worker_processes = True  # each instance's memory is its worker's

    def open(
        self, config: mc.ModelConfig, version_path: Path, spec: InstanceSpec
    ) -> PythonInstance:
        """Start the worker, run ``auto_complete_config`` (completing ``config`` in place,
        as Triton does before ``initialize``) and ``initialize``."""
        model_file = self._model_file(config, version_path)
        return PythonInstance(config, model_file, spec, model_dir=version_path)

    def open_deferred(
        self, config: mc.ModelConfig, version_path: Path, spec: InstanceSpec
    ) -> PythonInstance:
        """``open`` up to ``auto_complete_config``; ``finish_loading`` runs ``initialize``."""
        model_file = self._model_file(config, version_path)
        return PythonInstance(
            config, model_file, spec, defer_initialize=True, model_dir=version_path
        )

    def _model_file(self, config: mc.ModelConfig, version_path: Path) -> Path:
        """The python file the worker imports: the version's own ``model.py`` here; a
        python-based backend's runtime in a subclass (the PyTorch 2 runtime)."""
        model_file = version_path / (config.default_model_filename or "model.py")
        if not model_file.is_file():
            raise ValueError(
                f"model file '{model_file.name}' not found in version {version_path.name}"
            )
        return model_file


class _OneShot:
    """Set once by the worker's reader thread, awaited by the instance's thread: a plain
    lock held until set. Each execute made two ``threading.Event`` (a Condition, and a
    new lock for every wait): 3.2 µs to make and set against 0.4 µs for this."""

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False

    def set(self) -> None:
        if not self._set:
            self._set = True
            with contextlib.suppress(RuntimeError):  # set twice at once: released once
                self._lock.release()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        if self._set:
            return True
        if self._lock.acquire(timeout=-1 if timeout is None else timeout):
            self._lock.release()  # for any other waiter
            return True
        return self._set


class _Flag:
    """``_OneShot`` without a lock, for a non-decoupled call: the instance's thread reads
    the answer itself and only ever tests it (``_on_exit`` sets it from the reader after
    the worker is gone, which that thread notices by the link's end, not by waiting)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


class _Call:
    """One execute: its senders, what each request asked for, which requests ended."""

    __slots__ = ("answered", "executed", "final", "requested", "rescheduled", "senders")

    def __init__(
        self,
        senders: Sequence[ResponseSender],
        requested: list[set[str]],
        final: list[bool],
        decoupled: bool = True,
    ) -> None:
        self.senders = senders
        self.requested = requested
        self.final = final
        flag = _OneShot if decoupled else _Flag
        self.executed: _OneShot | _Flag = flag()
        # every request ended (its final response, or rescheduled): non-decoupled models
        # may answer from their own threads after ``execute`` returned, as in Triton
        self.answered: _OneShot | _Flag = flag()
        self.rescheduled: list[int] = []


#: TRITONSERVER_Error_Code of a TritonError -> the error the client gets (its gRPC status).
_ERROR_CODES: dict[int, type[ServerError]] = {
    0: Unknown,
    1: Internal,
    2: NotFound,
    3: InvalidArgument,
    4: Unavailable,
    5: Unimplemented,
    6: AlreadyExists,
    7: Cancelled,
}


_NO_RESCHEDULE = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is "
    "not configured to handle such a flag."
)


def _model_error(error: tuple[Any, ...] | str | None) -> ServerError | str | None:
    """A model's error response, with its TritonError code. Triton's python backend
    reports its request as a success (checked on Triton 2.51: success 1, fail 0, no
    BACKEND failure); were it delivered without its execution (a decoupled stream), it
    counts as a BACKEND failure."""
    if error is None or isinstance(error, str):
        return error
    message, code, *failed = error
    answer = _ERROR_CODES.get(code, Internal)(message, failure="BACKEND")
    answer.is_response = not failed  # the worker's own failure (execute raised) is not
    return answer


class PythonInstance:
    def __init__(
        self,
        config: mc.ModelConfig,
        model_file: Path,
        spec: InstanceSpec,
        defer_initialize: bool = False,
        model_dir: Path | None = None,
    ) -> None:
        """``model_dir``: the version folder the model's files are in (``get_model_dir``,
        the ``initialize`` arguments); ``model_file``'s folder unless a python-based
        backend's runtime serves it."""
        self.spec = spec
        self.model_name = config.name
        self.settings = Settings.from_config(config)
        self._model_file = model_file
        self._model_dir = model_dir or model_file.parent
        self._label = f"model '{config.name}' instance '{spec.name}'"
        self._lock = threading.Lock()
        self._calls: dict[int, _Call] = {}
        self._ids = itertools.count()
        self._end_reason: str | None = None  # why the current worker is being ended
        self._closed = False
        self.unavailable_reason: str | None = None
        self.restarts = 0
        self._running = False  # the current worker is up; cleared (under _lock) when it ends
        self._retry_at = 0.0
        self._config = config
        self._env = execution_env(config, self._model_dir.parent)
        self._worker = self._start(
            config, complete=current().auto_complete, initialize=not defer_initialize
        )
        self._decoupled = config.model_transaction_policy.decoupled

    # -- worker life cycle -------------------------------------------------------------

    def _start(
        self, config: mc.ModelConfig, complete: bool = True, initialize: bool = True
    ) -> WorkerProcess:
        """A worker with the model loaded (``auto_complete_config`` applied to ``config``)
        and, unless ``initialize`` is False (``finish_loading`` does it), initialized."""
        settings = self.settings
        worker = WorkerProcess(
            self._on_message,
            self._on_exit,
            settings.inline_limit,
            settings.pool_bytes,
            (settings.smallest_region, settings.region_growth),
            launcher(self._env) if self._env is not None else (),
        )
        timeout = settings.initialize_timeout
        start = timeout if settings.start_timeout is None else settings.start_timeout
        try:
            worker.call(None, "ready", start)
            (completed,) = worker.call(
                (
                    "load",
                    str(self._model_file),
                    self._label,
                    self.spec.name,
                    config_to_json(config),
                    complete,
                    str(self._model_dir),
                    self._model_dir != self._model_file.parent,
                    logging.getLogger().isEnabledFor(logging.DEBUG),
                ),
                "loaded",
                timeout,
            )
            if completed is not None:
                apply_completed(config, completed)
        except BaseException as exc:
            self._failed(worker, exc)
        if initialize:
            self._initialize(worker, config)
        return worker

    def _initialize(self, worker: WorkerProcess, config: mc.ModelConfig) -> None:
        try:
            worker.call(
                ("initialize", self._initialize_args(config)),
                "initialized",
                self.settings.initialize_timeout,
            )
        except BaseException as exc:
            self._failed(worker, exc)
        with self._lock:
            self._end_reason = None
            self._running = True

    def _failed(self, worker: WorkerProcess, exc: BaseException) -> NoReturn:
        self._end_reason = "load failed"
        worker.kill()
        if isinstance(exc, ModelRaised):  # Triton's reason: the stub's text, as INTERNAL
            raise ValueError(status_text(Internal(str(exc)))) from exc
        raise ValueError(f"failed to load python {self._label}: {exc}") from exc

    def finish_loading(self) -> None:
        """``initialize`` in the worker ``open_deferred`` left loaded: the loader runs it
        beside the other instances' loading, so N instances that each take 10 s to
        initialize are ready in about 10 s (as Triton loads them in parallel)."""
        if not self._running:
            self._initialize(self._worker, self._config)

    def _initialize_args(self, config: mc.ModelConfig) -> dict[str, str]:
        version_dir = self._model_dir
        return {
            "model_config": config_to_json(config),
            "model_instance_kind": self.spec.kind.removeprefix("KIND_"),
            "model_instance_name": self.spec.name,
            "model_instance_device_id": str(self.spec.device_id),
            "model_repository": str(version_dir.parent),
            "model_version": version_dir.name,
            "model_name": config.name,
        }

    def _restart(self) -> bool:
        """Replace a dead worker, in the scheduler thread (the instance is busy anyway).
        After a failed restart, requests fail fast for RESTART_BACKOFF seconds."""
        if time.monotonic() < self._retry_at:
            return False
        self._worker.join()  # its reader has failed what the old worker owed
        try:
            self._worker = self._start(self._config, complete=False)
        except ValueError as exc:
            self.unavailable_reason = str(exc)
            self._retry_at = time.monotonic() + RESTART_BACKOFF
            log.error("%s could not be restarted: %s", self._label, exc)
            return False
        self.unavailable_reason = None
        self.restarts += 1
        log.warning("%s: worker restarted (pid %d)", self._label, self._worker.pid)
        return True

    @property
    def available(self) -> bool:
        """False once the worker ended and until a restart succeeds (or after close)."""
        return not self._closed and self._running

    @property
    def worker_pid(self) -> int:
        return self._worker.pid

    # -- RequestInstance ---------------------------------------------------------------

    def signature(self) -> ModelSignature:
        return config_signature(self._config)

    def execute_requests(
        self, requests: Sequence[BackendRequest], senders: Sequence[ResponseSender]
    ) -> None:
        if not requests:
            return
        if self._closed:
            _fail_all(senders, f"{self._label} is closed")
            return
        call = _Call(
            senders,
            [set(r.requested_outputs) for r in requests],
            [False] * len(requests),
            self._decoupled,
        )
        call_id = next(self._ids)
        for attempt in range(2):
            with self._lock:
                if self._running:
                    self._calls[call_id] = call
                    break
            if attempt or not self._restart():
                _fail_all(senders, f"{self._label} is unavailable: {self.unavailable_reason}")
                return
        worker = self._worker
        try:
            packed = worker.channel.pack([list(r.inputs.items()) for r in requests])
        except Exception as exc:  # e.g. out of memory for the shared region
            with self._lock:
                self._calls.pop(call_id, None)
            _fail_all(senders, f"{self._label}: could not pass the inputs to the worker: {exc}")
            return
        wire = [_wire(r, refs) for r, refs in zip(requests, packed.refs, strict=True)]
        try:
            worker.send_call(("execute", call_id, self._decoupled, wire, packed.region), packed.fd)
        except OSError:
            pass  # the worker is gone; its reader fails the call
        finally:
            if packed.fd is not None:
                os.close(packed.fd)
        answered = self._wait(call) if self._decoupled else self._read_answer(worker, call)
        if not answered:
            self._end_reason = (
                f"{self._label}: execute did not return within "
                f"{self.settings.execute_timeout:g} s (execute_timeout_secs); "
                "the worker was killed and is being restarted"
            )
            log.error("%s", self._end_reason)
            worker.kill()
        for index in call.rescheduled:
            if requests[index].reschedulable:  # the scheduler runs it again
                requests[index].rescheduled = True
            else:  # Triton's outer-most release callback; Triton then never answers
                log.error("Failed to release request: %s", _NO_RESCHEDULE)
                _send(senders[index], None, InvalidArgument(_NO_RESCHEDULE), True)
        if not self._running:
            self._restart()

    def _read_answer(self, worker: WorkerProcess, call: _Call) -> bool:
        """Read the calls link until ``execute`` returned and every request was answered
        (a response sent from the model's own thread may come later), within
        ``execute_timeout_secs``; False when that ran out. A worker that died meanwhile
        ends the call through ``_on_exit``."""
        timeout = self.settings.execute_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        while not call.answered.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            try:
                received = worker.recv_call(left)
            except (ChannelClosed, OSError):
                worker.join()  # its reader has failed what the worker owed
                return True
            if received is not None:
                self._on_message(*received)
        return True

    def _wait(self, call: _Call) -> bool:
        """A decoupled model's call: until ``execute`` returned, within
        ``execute_timeout_secs`` (None: no limit); its responses come on the services
        link, read by the reader thread, and may keep coming afterwards."""
        return cast(_OneShot, call.executed).wait(self.settings.execute_timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._end_reason = f"{self._label} was unloaded"
        self._worker.stop(self.settings.finalize_timeout)

    # -- reader-thread callbacks -------------------------------------------------------

    def _on_message(self, message: tuple[Any, ...], fd: int | None) -> None:
        tag = message[0]
        if tag == "responses":
            _, call_id, items, region, done, rescheduled = message
            groups = self._worker.channel.unpack([r or [] for _, r, _, _ in items], region, fd)
            with self._lock:  # the instance's thread or the reader; _on_exit ends calls too
                call = self._calls.get(call_id)
                if call is None:
                    return
                answers = []
                for (index, refs, error, final), tensors in zip(items, groups, strict=True):
                    if call.final[index]:
                        continue
                    call.final[index] = final
                    answers.append((index, refs, error, final, tensors))
                if done:
                    for index in rescheduled:  # the scheduler runs these again
                        if not call.final[index]:
                            call.final[index] = True
                            call.rescheduled.append(index)
                # every request ended and execute returned (now, or with an earlier
                # message: a non-decoupled model's late response from its own thread)
                ended = (done or call.executed.is_set()) and all(call.final)
                if ended:
                    self._calls.pop(call_id, None)
            for index, refs, error, final, tensors in answers:
                outputs = None
                if refs is not None:
                    wanted = call.requested[index]
                    outputs = {n: a for n, a in tensors if not wanted or n in wanted}
                _send(call.senders[index], outputs, _model_error(error), final)
            if done:
                call.executed.set()
            if ended:
                call.answered.set()
        elif tag == "bls":
            serve_bls(self._worker.channel, self._worker.send, message, fd)
        elif tag == "control":
            serve_control(self._worker.send, message)
        elif tag == "metric":
            serve_metric(self._worker, self._worker.send, message)
        elif tag == "query_cancel":
            _, query_id, call_id, index = message
            with self._lock:
                call = self._calls.get(call_id)
            state = True if call is None else call.senders[index].cancelled
            with contextlib.suppress(OSError):
                self._worker.send(("cancel_state", query_id, state))
        elif fd is not None:
            os.close(fd)

    def _on_exit(self, how: str) -> None:
        worker = getattr(self, "_worker", None)  # None: it ended while starting
        if worker is not None:
            CUSTOM_METRICS.release_owner(worker)  # the ended worker's metric references
        with self._lock:
            self._running = False
            reason = self._end_reason or (
                f"{self._label}: the python worker process {how} unexpectedly; "
                "it is being restarted"
            )
            expected = self._end_reason is not None
            calls = list(self._calls.values())
            self._calls.clear()
        if not expected:
            log.error("%s", reason)
        for call in calls:
            for index, done in enumerate(call.final):
                if not done:
                    call.final[index] = True
                    _send(call.senders[index], None, reason, True)
            call.executed.set()
            call.answered.set()


def _wire(request: BackendRequest, tensors: list[Any]) -> tuple[Any, ...]:
    """The request as the worker reads it: a plain tuple in ``WireRequest``'s order (a
    NamedTuple built only to be converted costs more than the fields)."""
    parameters = request.parameters
    correlation = request.correlation_id
    return (
        tensors,
        request.request_id,
        correlation if correlation is not None else 0,
        (1 if request.sequence_start else 0) | (2 if request.sequence_end else 0),
        requested if type(requested := request.requested_outputs) is list else list(requested),
        # Compact and unescaped, as Triton's python backend writes it (rapidjson).
        json.dumps(parameters, separators=(",", ":"), ensure_ascii=False) if parameters else "{}",
        request.timeout_us,
        request.trace_context,
    )


def _send(
    sender: ResponseSender, outputs: Any, error: ServerError | str | None, final: bool
) -> None:
    try:
        sender.send(outputs, error=error, final=final)
    except Exception:  # a sender's failure must not kill the reader thread
        log.exception("response sender failed")


def _fail_all(senders: Sequence[ResponseSender], message: str) -> None:
    for sender in senders:
        _send(sender, None, message, True)
