"""The worker of one Python model instance: ``python -m service.backends.python.stub FD ...``.

Like Triton's stub: it imports ``model.py``, runs ``auto_complete_config``, ``initialize``,
``execute`` and ``finalize`` when the server asks, and streams every response back as the
model produces it. The main thread runs the model (some libraries insist on the main
thread) and reads the server's commands on the calls link itself, answering on it (a
decoupled model's responses go on the services link); a reader thread takes the answers
to the model's own calls on the services link (BLS, model control, metrics,
cancellation queries), so they arrive while ``execute`` runs. The worker exits when the
server's end of a link closes or its parent process changes, so it never outlives the
server.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import sys
import threading
import traceback
from functools import partial
from typing import Any

from . import triton_python_backend_utils as pb_utils
from .bls_client import BlsClient
from .numpy1_names import restore_numpy1_names
from .pb_core import BF16
from .pb_metrics import set_metric_transport
from .protocol import Channel, ChannelClosed, Packed
from .stub_runtime import (
    StubError,
    describe_exception,
    hard_exit,
    import_model_class,
    watch_parent,
)

__all__ = ["Stub", "main"]

log = logging.getLogger("python_model")
# (request index, outputs or None, (error message, TritonError code[, failed]) or None,
# final); ``failed``: the worker's own failure, not the model's error response.
Item = tuple[int, list[tuple[str, Any]] | None, tuple[Any, ...] | None, bool]


#: What ``request.trace()`` returns for every untraced request (it holds only the context).
_UNTRACED = pb_utils.InferenceTrace("")


class _Failure(pb_utils.TritonError):
    """An error this worker answers for the model (execute raised, sent nothing, sent
    something malformed): the request failed, unlike one the model answered with an
    error response, which Triton counts as a success."""


class _WatchedSender(pb_utils.InferenceResponseSender):
    """A non-decoupled request's sender. A request the model can no longer answer (its
    sender collected while still open) would wait forever: it fails, as when no response
    came. ``__del__`` costs nothing until then; a ``weakref.finalize`` per request cost
    about 2 µs to register."""

    def __init__(
        self,
        emit: pb_utils.Emit,
        cancelled: Any,
        unanswered: Any,
    ) -> None:
        super().__init__(emit, cancelled, False)
        self._unanswered: Any = unanswered

    def detach(self) -> None:
        """The request goes back to the server (rescheduled): nothing is owed."""
        self._unanswered = None

    def __del__(self) -> None:
        unanswered = self._unanswered
        if unanswered is not None and not self._closed:
            unanswered(self._emit)


class Stub:
    def __init__(self, calls: Channel, channel: Channel) -> None:
        """``calls``: the commands and their answers; ``channel``: the services link."""
        self.calls = calls
        self.channel = channel
        self.queries: dict[int, tuple[threading.Event, list[bool]]] = {}
        self.query_ids = itertools.count()
        self.model_class: Any = None
        self.model: Any = None
        self.label = "python model"
        self.instance_name = "python model"  # Triton's texts name the instance: 'm_0_0'
        self.loop: asyncio.AbstractEventLoop | None = None
        self.batch_lock = threading.Lock()
        self.batches: dict[int, list[Item]] = {}
        self.bls = BlsClient(channel)
        self.bf16_inputs: set[str | None] = set()

    def run(self) -> None:
        threading.Thread(target=self._read, name="stub-reader", daemon=True).start()
        pb_utils._set_model_control(self.bls.control)  # allowed in initialize too
        set_metric_transport(self.bls.metric, self.bls.metric_release)
        threading.Thread(target=watch_parent, args=(os.getppid(),), daemon=True).start()
        self.calls.send(("ready", os.getpid()))
        while True:
            try:
                message, fd = self.calls.recv()
            except (ChannelClosed, OSError):
                hard_exit(1)  # the server went away: nobody is left to answer
            tag = message[0]
            if tag == "execute":
                self._execute(message, fd)
            elif tag == "load":
                self._reply(self._load, message)
            elif tag == "initialize":
                self._reply(self._initialize, message)
            elif tag == "finalize":
                self._finalize()
                self.calls.send(("finalized",))
                hard_exit(0)
            elif fd is not None:
                os.close(fd)

    def _read(self) -> None:
        try:
            while True:
                message, fd = self.channel.recv()
                if message[0] == "bls_response":
                    self.bls.deliver(message, fd)
                elif message[0] == "control_reply":
                    self.bls.deliver_control(message)
                elif message[0] == "cancel_state":
                    _, query_id, state = message
                    event, result = self.queries.pop(query_id, (None, [False]))
                    result[0] = bool(state)
                    if event is not None:
                        event.set()
                elif fd is not None:
                    os.close(fd)
        except (ChannelClosed, OSError):
            pass  # the server went away: nobody is left to answer
        except BaseException:
            traceback.print_exc()
        hard_exit(1)

    def _reply(self, step: Any, message: tuple[Any, ...]) -> None:
        try:
            result = step(*message[1:])
        except BaseException as exc:  # anything the model raises fails the load, with a reason
            traceback.print_exc()
            self.calls.send(("failed", describe_exception(exc)))
        else:
            self.calls.send(result)

    def _load(
        self,
        model_path: str,
        label: str,
        instance_name: str,
        config_json: str,
        complete: bool,
        model_dir: str,
        backend_runtime: bool,
        verbose: bool,
    ) -> tuple[Any, ...]:
        """``backend_runtime``: ``model_path`` is a python-based backend's runtime (the
        PyTorch 2 runtime) serving the files in ``model_dir``; ``verbose``: the server
        logs verbose lines, so ``Logger.log_verbose`` writes."""
        self.label = label
        self.instance_name = instance_name
        logging.basicConfig(
            stream=sys.stderr,
            level=logging.DEBUG if verbose else logging.INFO,
            format="%(asctime)s " + label.replace("%", "%%") + " %(levelname)s: %(message)s",
        )
        restore_numpy1_names()  # models written for Triton's NumPy 1 (decision 051)
        pb_utils._set_model_dir(model_dir)
        self.model_path = model_path
        self.model_class = import_model_class(model_path, backend_runtime)
        completed = None
        auto_complete = getattr(self.model_class, "auto_complete_config", None)
        if complete and auto_complete is not None:
            config = pb_utils.ModelConfig(config_json)
            result = auto_complete(config)
            completed = json.dumps((result if result is not None else config).as_dict())
        return ("loaded", completed)

    def _initialize(self, args: dict[str, str]) -> tuple[Any, ...]:
        # BF16 inputs arrive as their uint16 patterns: the config says which they are.
        inputs = json.loads(args.get("model_config") or "{}").get("input", [])
        self.bf16_inputs = {i.get("name") for i in inputs if i.get("data_type") == "TYPE_BF16"}
        self.model = self.model_class()
        initialize = getattr(self.model, "initialize", None)
        if initialize is not None:
            initialize(args)
        # As in Triton, BLS is for ``execute`` only: not in initialize or finalize.
        pb_utils._set_bls_executor(self.bls.execute)
        return ("initialized",)

    def _loop(self) -> asyncio.AbstractEventLoop:
        """Triton's ``GetAsyncEventLoop``: one loop, run forever by a daemon thread, so that
        tasks an ``async def execute`` starts keep running after it returns."""
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)
            threading.Thread(target=self.loop.run_forever, name="stub-async", daemon=True).start()
        return self.loop

    def _finalize(self) -> None:
        pb_utils._set_bls_executor(None)
        finalize = getattr(self.model, "finalize", None)
        if finalize is None:
            return
        try:
            finalize()
        except BaseException:
            log.exception("finalize raised")

    def _execute(self, message: tuple[Any, ...], fd: int | None) -> None:
        """Triton's ``ProcessRequests``: run ``execute``, check what it returned, answer
        every open request with the error if anything raised."""
        _, call_id, decoupled, wire, region = message
        groups = self.calls.unpack([item[0] for item in wire], region, fd)
        requests = self._requests(call_id, decoupled, wire, groups)
        del groups
        if not decoupled:
            with self.batch_lock:
                self.batches[call_id] = []  # responses leave together when execute returns
        result: Any = None
        try:
            if not hasattr(self.model, "execute"):  # Triton's check, at each execute
                raise StubError(
                    f"Python model {self.model_path} does not implement `execute` method."
                )
            result = self.model.execute(requests)
            if type(result) is not list and asyncio.iscoroutine(result):
                future = asyncio.run_coroutine_threadsafe(result, self._loop())
                if decoupled:  # as Triton: not awaited; its requests end through the senders
                    future.add_done_callback(partial(self._background_done, requests))
                    result = None
                else:
                    result = future.result()
            self._deliver(requests, result, decoupled)
        except BaseException as exc:
            text = (
                f"Failed to process the request(s) for model '{self.instance_name}', "
                f"message: {describe_exception(exc)}"
            )
            log.error("%s", text)
            self._fail_open(requests, text)
        rescheduled = [
            index
            for index, request in enumerate(requests)
            if request.release_flags() == pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
        ]
        for index in rescheduled:  # not unanswered: the server runs it again
            sender = requests[index].get_response_sender()
            if isinstance(sender, _WatchedSender):
                sender.detach()
        del requests, result  # lets the input region be released with the reply
        self.bls.release_barrier()
        with self.batch_lock:
            items = self.batches.pop(call_id, [])
        self._send_responses(call_id, decoupled, items, done=True, rescheduled=rescheduled)

    def _background_done(self, requests: list[pb_utils.InferenceRequest], future: Any) -> None:
        """A decoupled ``async def execute`` ended in the background. Triton only logs an
        exception; its requests are also ended here, so that their clients hear of it."""
        if future.cancelled() or future.exception() is None:
            return
        exc = future.exception()
        text = (
            f"Failed to process the request(s) for model '{self.instance_name}', "
            f"message: {describe_exception(exc)}"
        )
        log.error("%s", text)
        self._fail_open(requests, text)

    def _requests(
        self, call_id: int, decoupled: bool, wire: list[tuple[Any, ...]], groups: list[Any]
    ) -> list[pb_utils.InferenceRequest]:
        """``wire``: the server's ``WireRequest`` tuples, unpacked by position (building
        the NamedTuple cost more than the rest of a request's fields)."""
        requests = []
        bf16 = self.bf16_inputs
        received = pb_utils.Tensor._received
        for index, (item, tensors) in enumerate(zip(wire, groups, strict=True)):
            _, request_id, correlation_id, flags, requested, parameters, timeout, trace = item
            emit = partial(self._emit, call_id, decoupled, index)
            cancelled = partial(self._is_cancelled, call_id, index)
            sender = (
                pb_utils.InferenceResponseSender(emit, cancelled, True)
                if decoupled
                else _WatchedSender(emit, cancelled, self._unanswered)
            )
            requests.append(
                pb_utils.InferenceRequest._received(
                    [
                        received(name, array)
                        if name not in bf16
                        else pb_utils.Tensor(name, array, BF16)
                        for name, array in tensors
                    ],
                    request_id,
                    correlation_id,
                    requested,
                    flags,
                    parameters,
                    timeout,
                    pb_utils.InferenceTrace(trace) if trace else _UNTRACED,
                    sender,
                )
            )
        return requests

    def _unanswered(self, emit: pb_utils.Emit) -> None:
        error = pb_utils.InferenceResponse(error=_Failure(f"{self.label} sent no response"))
        with contextlib.suppress(Exception):
            emit(error, True)

    def _deliver(
        self, requests: list[pb_utils.InferenceRequest], result: Any, decoupled: bool
    ) -> None:
        """Triton's ``ProcessReturnedResponses``, its checks and texts; raises on misuse."""
        if result is None:
            return
        if decoupled:
            raise StubError(
                f"Python model '{self.instance_name}' is using the decoupled mode and the "
                "execute function must return None."
            )
        if not isinstance(result, (list, tuple)):
            raise StubError(f"Expected a list in the execute return, found type '{type(result)}'.")
        if len(result) != len(requests):
            raise StubError(
                "Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, and "
                f"InferenceResponse(s) size is:{len(result)}\n"
            )
        reschedule = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
        for request, response in zip(requests, result, strict=True):
            if response is None:
                continue
            if request.release_flags() == reschedule:
                raise StubError(
                    "Expected a None object in the execute function return list for "
                    f"reschduled request, found type '{type(response)}'."
                )
            if not isinstance(response, pb_utils.InferenceResponse):
                raise StubError(
                    "Expected an 'InferenceResponse' object in the execute function return "
                    f"list, found type '{type(response)}'."
                )
            request.get_response_sender().update_state(True, True)
        for request, response in zip(requests, result, strict=True):
            if response is not None:
                self._emit_checked(request, response)

    def _emit_checked(
        self, request: pb_utils.InferenceRequest, response: pb_utils.InferenceResponse
    ) -> None:
        sender = request.get_response_sender()
        try:
            sender._emit(response, True)
        except Exception as exc:  # e.g. an output that is not a pb_utils.Tensor
            text = f"{self.label}: {describe_exception(exc)}"
            sender._emit(pb_utils.InferenceResponse(error=_Failure(text)), True)

    def _fail_open(self, requests: list[pb_utils.InferenceRequest], text: str) -> None:
        """Every request not yet ended gets ``text``; all senders are closed after it."""
        error = pb_utils.InferenceResponse(error=_Failure(text))
        for request in requests:
            sender = request.get_response_sender()
            if not sender.closed:
                sender.mark_closed()
                with contextlib.suppress(Exception):
                    sender._emit(error, True)
            sender.mark_closed()

    def _emit(
        self,
        call_id: int,
        decoupled: bool,
        index: int,
        response: pb_utils.InferenceResponse | None,
        final: bool,
    ) -> None:
        error: tuple[str, int] | tuple[str, int, bool] | None = None
        outputs: list[tuple[str, Any]] | None = None
        if response is not None and response.has_error():
            err = response.error()
            error = (err.message(), err.code()) if err is not None else ("unknown error", 1)
            if isinstance(err, _Failure):  # not the model's answer: its execution failed
                error = (*error, True)
        elif response is not None:
            outputs = []
            for tensor in response.output_tensors():
                if not isinstance(tensor, pb_utils.Tensor):
                    raise pb_utils.TritonModelException("output tensors must be pb_utils.Tensor")
                outputs.append((tensor.name(), tensor.host_array()))
        item = (index, outputs, error, final)
        with self.batch_lock:
            batch = self.batches.get(call_id)
            if batch is not None:
                batch.append(item)
                return
        self._send_responses(call_id, decoupled, [item], done=False)

    def _send_responses(
        self,
        call_id: int,
        decoupled: bool,
        items: list[Item],
        done: bool,
        rescheduled: list[int] | None = None,
    ) -> None:
        """On the calls link, where the server's instance thread waits for them; a
        decoupled model's on the services link (they may come after ``execute``)."""
        link = self.channel if decoupled else self.calls
        try:
            packed = self.channel.pack([outputs or [] for _, outputs, _, _ in items])
        except Exception as exc:
            if not done:
                raise  # the model's send() call reports it
            text = (f"{self.label}: could not return the outputs: {describe_exception(exc)}", 1)
            items = [(i, None, text if out is not None else err, f) for i, out, err, f in items]
            packed = Packed([[] for _ in items], None, None)
        wire = [
            (index, refs if outputs is not None else None, error, final)
            for (index, outputs, error, final), refs in zip(items, packed.refs, strict=True)
        ]
        try:
            message = ("responses", call_id, wire, packed.region, done, rescheduled or [])
            link.send(message, packed.fd)
        finally:
            if packed.fd is not None:
                os.close(packed.fd)

    def _is_cancelled(self, call_id: int, index: int) -> bool:
        query_id = next(self.query_ids)
        event = threading.Event()
        result = [False]
        self.queries[query_id] = (event, result)
        self.channel.send(("query_cancel", query_id, call_id, index))
        event.wait(10.0)
        return result[0]


def main() -> None:
    calls_fd, services_fd = (int(fd) for fd in sys.argv[1].split(","))
    inline_limit, pool_bytes, smallest, growth = (int(arg) for arg in sys.argv[2:6])
    # Triton's stub embeds its interpreter with no arguments (sys.argv == [""]): a model
    # that runs ``unittest.main(...)`` (Triton's qa models do) must not see ours.
    sys.argv = [""]
    for fd in (calls_fd, services_fd):
        os.set_inheritable(fd, False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when its models stop
    sys.modules["triton_python_backend_utils"] = pb_utils
    calls = Channel(socket.socket(fileno=calls_fd), inline_limit, pool_bytes, smallest, growth)
    Stub(calls, calls.sibling(socket.socket(fileno=services_fd))).run()


if __name__ == "__main__":
    main()
