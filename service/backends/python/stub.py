"""The worker of one Python model instance: ``python -m service.backends.python.stub FD ...``.

Like Triton's stub: it imports ``model.py``, runs ``auto_complete_config``, ``initialize``,
``execute`` and ``finalize`` when the server asks, and streams every response back as the
model produces it. The main thread runs the model (some libraries insist on the main
thread); a reader thread takes the server's messages, so cancellation queries are answered
while ``execute`` runs. The worker exits when the server's end of the socket closes or its
parent process changes, so it never outlives the server.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import logging
import os
import queue
import signal
import socket
import sys
import threading
import traceback
from functools import partial
from typing import Any

from . import triton_python_backend_utils as pb_utils
from .protocol import Channel, ChannelClosed, Packed, WireRequest
from .stub_runtime import describe_exception, hard_exit, import_model_class, watch_parent

__all__ = ["Stub", "main"]

log = logging.getLogger("python_model")
_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
# (request index, outputs or None, error or None, final)
Item = tuple[int, list[tuple[str, Any]] | None, str | None, bool]


class Stub:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.commands: queue.Queue[tuple[tuple[Any, ...], int | None]] = queue.Queue()
        self.queries: dict[int, tuple[threading.Event, list[bool]]] = {}
        self.query_ids = itertools.count()
        self.model_class: Any = None
        self.model: Any = None
        self.label = "python model"
        self.loop: asyncio.AbstractEventLoop | None = None
        self.batch_lock = threading.Lock()
        self.batches: dict[int, list[Item]] = {}

    def run(self) -> None:
        threading.Thread(target=self._read, name="stub-reader", daemon=True).start()
        threading.Thread(target=watch_parent, args=(os.getppid(),), daemon=True).start()
        self.channel.send(("ready", os.getpid()))
        while True:
            message, fd = self.commands.get()
            tag = message[0]
            if tag == "execute":
                self._execute(message, fd)
            elif tag == "load":
                self._reply(self._load, message)
            elif tag == "initialize":
                self._reply(self._initialize, message)
            elif tag == "finalize":
                self._finalize()
                self.channel.send(("finalized",))
                hard_exit(0)

    def _read(self) -> None:
        try:
            while True:
                message, fd = self.channel.recv()
                if message[0] == "cancel_state":
                    _, query_id, state = message
                    event, result = self.queries.pop(query_id, (None, [False]))
                    result[0] = bool(state)
                    if event is not None:
                        event.set()
                else:
                    self.commands.put((message, fd))
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
            self.channel.send(("failed", describe_exception(exc)))
        else:
            self.channel.send(result)

    def _load(
        self, model_path: str, label: str, config_json: str, complete: bool
    ) -> tuple[Any, ...]:
        self.label = label
        logging.basicConfig(
            stream=sys.stderr,
            level=logging.INFO,
            format="%(asctime)s " + label.replace("%", "%%") + " %(levelname)s: %(message)s",
        )
        self.model_class = import_model_class(model_path)
        completed = None
        auto_complete = getattr(self.model_class, "auto_complete_config", None)
        if complete and auto_complete is not None:
            config = pb_utils.ModelConfig(config_json)
            result = auto_complete(config)
            completed = json.dumps((result if result is not None else config).as_dict())
        return ("loaded", completed)

    def _initialize(self, args: dict[str, str]) -> tuple[Any, ...]:
        self.model = self.model_class()
        initialize = getattr(self.model, "initialize", None)
        if initialize is not None:
            initialize(args)
        return ("initialized",)

    def _loop(self) -> asyncio.AbstractEventLoop:
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
        return self.loop

    def _finalize(self) -> None:
        finalize = getattr(self.model, "finalize", None)
        if finalize is None:
            return
        try:
            finalize()
        except BaseException:
            log.exception("finalize raised")

    def _execute(self, message: tuple[Any, ...], fd: int | None) -> None:
        _, call_id, decoupled, wire, region = message
        groups = self.channel.unpack([item.inputs for item in wire], region, fd)
        requests = self._requests(call_id, decoupled, wire, groups)
        del groups
        if not decoupled:
            with self.batch_lock:
                self.batches[call_id] = []  # responses leave together when execute returns
        result: Any = None
        try:
            result = self.model.execute(requests)
            if inspect.isawaitable(result):  # ``async def execute``: run it to completion
                result = self._loop().run_until_complete(result)
        except BaseException as exc:
            traceback.print_exc()
            text = f"Failed to process the request(s) for {self.label}, message: "
            self._fail_open(requests, text + describe_exception(exc))
        else:
            if not decoupled:
                self._deliver(requests, result)
            elif result is not None:
                log.warning("execute of a decoupled model should return None; result ignored")
        del requests, result  # lets the input region be released with the reply
        with self.batch_lock:
            items = self.batches.pop(call_id, [])
        self._send_responses(call_id, items, done=True)

    def _requests(
        self, call_id: int, decoupled: bool, wire: list[WireRequest], groups: list[Any]
    ) -> list[pb_utils.InferenceRequest]:
        requests = []
        for index, (item, tensors) in enumerate(zip(wire, groups, strict=True)):
            sender = pb_utils.InferenceResponseSender(
                partial(self._emit, call_id, index),
                partial(self._is_cancelled, call_id, index),
                decoupled,
            )
            requests.append(
                pb_utils.InferenceRequest(
                    [pb_utils.Tensor(name, array) for name, array in tensors],
                    request_id=item.request_id,
                    correlation_id=item.correlation_id,
                    requested_output_names=item.requested_outputs,
                    flags=item.flags,
                    parameters=item.parameters,
                    sender=sender,
                )
            )
        return requests

    def _deliver(self, requests: list[pb_utils.InferenceRequest], result: Any) -> None:
        """Non-decoupled: one returned response per request, in order."""
        if result is None or not isinstance(result, (list, tuple)) or len(result) != len(requests):
            if result is None and all(r.get_response_sender().closed for r in requests):
                return  # every request was answered through its response sender
            count = (
                "None"
                if result is None
                else len(result)
                if isinstance(result, (list, tuple))
                else type(result).__name__
            )
            self._fail_open(
                requests,
                f"{self.label}: the number of InferenceResponse objects does not match the "
                f"number of InferenceRequest objects: {len(requests)} requests, {count} responses",
            )
            return
        for request, response in zip(requests, result, strict=True):
            sender = request.get_response_sender()
            if sender.closed:
                continue
            try:
                if not isinstance(response, pb_utils.InferenceResponse):
                    raise pb_utils.TritonModelException(
                        f"execute returned {type(response).__name__}, not an InferenceResponse"
                    )
                sender.send(response, _FINAL)
            except Exception as exc:
                self._fail_open([request], f"{self.label}: {describe_exception(exc)}")

    def _fail_open(self, requests: list[pb_utils.InferenceRequest], text: str) -> None:
        error = pb_utils.InferenceResponse(error=pb_utils.TritonError(text))
        for request in requests:
            sender = request.get_response_sender()
            if not sender.closed:
                sender.send(error, _FINAL)

    def _emit(
        self, call_id: int, index: int, response: pb_utils.InferenceResponse | None, final: bool
    ) -> None:
        error = None
        outputs: list[tuple[str, Any]] | None = None
        if response is not None and response.has_error():
            err = response.error()
            error = err.message() if err is not None else "unknown error"
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
        self._send_responses(call_id, [item], done=False)

    def _send_responses(self, call_id: int, items: list[Item], done: bool) -> None:
        try:
            packed = self.channel.pack([outputs or [] for _, outputs, _, _ in items])
        except Exception as exc:
            if not done:
                raise  # the model's send() call reports it
            text = f"{self.label}: could not return the outputs: {describe_exception(exc)}"
            items = [(i, None, text if out is not None else err, f) for i, out, err, f in items]
            packed = Packed([[] for _ in items], None, None)
        wire = [
            (index, refs if outputs is not None else None, error, final)
            for (index, outputs, error, final), refs in zip(items, packed.refs, strict=True)
        ]
        try:
            self.channel.send(("responses", call_id, wire, packed.region, done), packed.fd)
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
    fd, inline_limit, pool_bytes, smallest, growth = (int(arg) for arg in sys.argv[1:6])
    os.set_inheritable(fd, False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when its models stop
    sys.modules["triton_python_backend_utils"] = pb_utils
    channel = Channel(socket.socket(fileno=fd), inline_limit, pool_bytes, smallest, growth)
    Stub(channel).run()


if __name__ == "__main__":
    main()
