"""Triton's own trace mode (``--trace-config triton,file=<path>``): the JSON trace file
Triton's ``src/tracer.cc`` writes.

A sampled request is one trace: an id (1, 2, ... per server), its model, and one entry per
timestamp (``GRPC_WAITREAD_START`` / ``_END``, ``REQUEST_START``, ``QUEUE_START``,
``COMPUTE_START``, ``COMPUTE_INPUT_END``, ``COMPUTE_OUTPUT_START``, ``COMPUTE_END``,
``REQUEST_END``, ``GRPC_SEND_START`` / ``_END``; steady-clock nanoseconds) at level
TIMESTAMPS, and one per tensor (``TENSOR_QUEUE_INPUT``, ``TENSOR_BACKEND_INPUT``,
``TENSOR_BACKEND_OUTPUT``, data formatted as C++ streams print it) at level TENSORS. The
timestamps come from the timings the core returns (as the OpenTelemetry spans' do).

The file: with ``log-frequency`` 0, every trace goes to ``<file>`` as one JSON array,
closed at exit; with N, each N traces go to ``<file>.<k>`` (k = 0, 1, ...), and what is
left at exit to the next index; once ``count`` traces were all taken and written, they go
to the next index at once. Each trace is written whole when its request ends. A model
with settings of its own (TraceSetting) collects its traces apart, by its own
``log_frequency``, into the same file's indexes.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Iterable
from contextvars import Token
from types import TracebackType
from typing import Any

import numpy as np

from wire import datatypes

from ..scheduling.base import ExecutionResult
from ..types import TRACE_CONTEXT, ExecutionRecord, InferResponse, TraceParent

__all__ = ["TRITON_PARENT", "TraceLog", "TritonTrace", "tensor_data"]

#: How a Triton-mode trace names itself in ``TRACE_CONTEXT`` (its id follows): there is
#: no OpenTelemetry context then, only the parent a BLS child trace points to.
TRITON_PARENT = "triton:"

log = logging.getLogger(__name__)


class TraceLog:
    """One trace file (Triton's ``TraceFile`` and the setting's ``WriteTrace``)."""

    def __init__(self, path: str, log_frequency: int) -> None:
        self.path = path
        self.log_frequency = log_frequency
        self._lock = threading.Lock()
        # traces not yet in a file, per setting: "" global, or a model with settings of
        # its own (Triton's TraceSetting each buffers its own); their log-frequency
        self._pending: dict[str, list[str]] = {}
        self.model_frequency: dict[str, int] = {}
        self._index = 0  # next <file>.<index>
        self._opened = False  # <file> holds "[" and traces
        self.collected = 0
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    def frequency(self, scope: str = "") -> int:
        """The log-frequency of a setting: a model's own, else the global one."""
        return self.model_frequency.get(scope, self.log_frequency) if scope else self.log_frequency

    def write(self, trace: str, count_done: bool, scope: str = "") -> None:
        """A finished trace of a setting (``scope``: "" or a model with its own settings);
        ``count_done``: ``count`` reached 0 and every sampled trace has been written
        (Triton's ``count_ == 0 && collected_ == sample_``)."""
        with self._lock:
            pending = self._pending.setdefault(scope, [])
            pending.append(trace)
            self.collected += 1
            frequency = self.frequency(scope)
            if count_done or (frequency and len(pending) >= frequency):
                self._save_indexed(scope)

    def close(self) -> None:
        """At exit: the rest of each setting to the next index (log-frequency) or to
        ``<file>``, closed."""
        with self._lock:
            for scope, pending in list(self._pending.items()):
                if pending and self.frequency(scope):
                    self._save_indexed(scope)
                elif pending:
                    self._append(",".join(pending))
            self._pending = {}
            if self._opened:
                self._write(self.path, "]", "a")

    def _save_indexed(self, scope: str) -> None:
        name = f"{self.path}.{self._index}"
        self._index += 1
        self._write(name, "[" + ",".join(self._pending.pop(scope, [])) + "]", "w")

    def _append(self, text: str) -> None:
        if self._opened:
            self._write(self.path, "," + text, "a")
        else:
            self._write(self.path, "[" + text, "w")
            self._opened = True

    def _write(self, name: str, text: str, mode: str) -> None:
        try:
            with open(name, mode, encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            log.error("failed creating trace file: %s", exc)


def _number(value: Any, kind: str) -> str:
    if kind == "f":
        return format(float(value), "g")
    if kind == "b":
        return "1" if value else "0"
    return str(int(value))


def tensor_data(array: Any, datatype: str) -> str:
    """The tensor's elements as Triton's tracer prints them: numbers as C++ streams
    (floats ``%g``), BOOL 0/1, INT8 / UINT8 as characters, BYTES as ``\\"text\\"``,
    FP16 / BF16 nothing."""
    if datatype in ("FP16", "BF16"):
        return ""
    flat = np.asarray(array).reshape(-1)
    if datatype == "BYTES":
        items = (bytes(v) if not isinstance(v, str) else v.encode() for v in flat)
        return ",".join('\\"' + v.decode("utf-8", "replace") + '\\"' for v in items)
    if datatype in ("INT8", "UINT8"):
        return ",".join(chr(int(v) & 0xFF) for v in flat)
    kind = "f" if datatype in ("FP32", "FP64") else "b" if datatype == "BOOL" else "i"
    return ",".join(_number(v, kind) for v in flat)


def _tensor_entry(trace_id: int, activity: str, name: str, datatype: str, array: Any) -> str:
    shape = ",".join(str(d) for d in np.shape(array))
    data = json.dumps(tensor_data(array, datatype))[1:-1].replace('\\\\"', '\\"')
    return (
        f'{{"id":{trace_id},"activity":"{activity}","tensor":{{"name":"{name}",'
        f'"data":"{data}","shape":"{shape}","dtype":"{datatype}"}}}}'
    )


def _inputs(request: Any) -> Iterable[tuple[str, str, Any]]:
    """(name, datatype, array) of a request's inputs: the core's ``InferRequest`` or the
    wire message (read by attribute: raw contents in order)."""
    raw = list(getattr(request, "raw_input_contents", ()) or ())
    for index, tensor in enumerate(request.inputs):
        shape = tuple(int(d) for d in tensor.shape)
        contents = getattr(tensor, "contents", None)
        data = getattr(tensor, "raw", None)
        if data is None and index < len(raw):
            data = raw[index]
        try:
            if isinstance(contents, np.ndarray):
                array = contents.reshape(shape)
            elif data is not None:
                array = _from_raw(bytes(data), tensor.datatype, shape)
            else:
                continue
        except Exception:  # a malformed tensor is the core's to refuse, not the trace's
            continue
        yield tensor.name, tensor.datatype, array


def _from_raw(data: bytes, datatype: str, shape: tuple[int, ...]) -> Any:
    count = datatypes.element_count(shape)
    if datatype == "BYTES":
        return datatypes.deserialize_bytes_tensor(data, count).reshape(shape)
    kind = datatypes.lookup(datatype)
    if kind is None:
        raise ValueError(datatype)
    return np.frombuffer(data, dtype=kind.numpy, count=count).reshape(shape)


class TritonTrace:
    """One sampled request in Triton's trace mode: a ``TraceScope`` for the servicer."""

    def __init__(
        self,
        owner: TraceLog,
        request: Any,
        tensors: bool,
        timestamps: bool,
        done: Any,
        scope: str = "",
        parent_id: int = 0,
    ) -> None:
        """``parent_id``: the trace of the request whose Python model made this one (a BLS
        child trace: no gRPC timestamps, ``parent_id`` in its head, as Triton writes)."""
        self._log = owner
        self._done = done  # () -> bool: Triton's "count reached and all collected"
        self._scope = scope  # the setting it was sampled under: "" or the model's own
        self.id = owner.next_id()
        self._tensors = tensors
        self._timestamps = timestamps
        self._request = request
        self._start = time.monotonic_ns()
        self.record = ExecutionRecord()
        self._outputs: dict[str, tuple[str, Any]] = {}
        self._version = str(getattr(request, "model_version", "") or "")
        self._parent_id = parent_id
        self._context_token: Token[TraceParent | None] | None = None

    def __enter__(self) -> TritonTrace:
        # A Python model's BLS requests (trace=request.trace()) become child traces.
        self._context_token = TRACE_CONTEXT.set(self)
        return self

    def parent_text(self) -> str:
        return f"{TRITON_PARENT}{self.id}"

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._context_token is not None:
            TRACE_CONTEXT.reset(self._context_token)
        self._log.write(self._render(time.monotonic_ns()), self._done(), self._scope)

    def executed(self, result: ExecutionResult | None) -> None:
        self.record.result = result

    def sent(self, response: InferResponse) -> None:
        self.answered(response)

    def answered(self, response: InferResponse) -> None:
        """The response: its version (the one that ran) and, at TENSORS, its outputs."""
        self._version = str(response.model_version or self._version)
        for output in response.outputs:
            self._outputs[output.name] = (output.datatype, output.array)

    def fail(self, message: str) -> None:
        pass

    def _render(self, end: int) -> str:
        tid = self.id
        entries: list[str] = []

        def stamp(name: str, ns: int) -> None:
            if self._timestamps:
                entries.append(f'{{"id":{tid},"timestamps":[{{"name":"{name}","ns":{ns}}}]}}')

        request = self._request
        child = self._parent_id != 0
        if not child:
            stamp("GRPC_WAITREAD_START", self._start)
            stamp("GRPC_WAITREAD_END", self._start)
        version = self._version if self._version.isdigit() else "-1"
        head = f'{{"id":{tid},"model_name":{json.dumps(request.model_name)},'
        head += f'"model_version":{version}'
        if getattr(request, "id", ""):
            head += f',"request_id":{json.dumps(request.id)}'
        if child:
            head += f',"parent_id":{self._parent_id}'
        entries.append(head + "}")
        stamp("REQUEST_START", self._start)
        inputs = list(_inputs(request)) if self._tensors else []
        for name, datatype, array in inputs:
            entries.append(_tensor_entry(tid, "TENSOR_QUEUE_INPUT", name, datatype, array))
        result = self.record.result
        if result is not None:
            t = result.timings
            stamp("QUEUE_START", t.start - result.queue_ns)
            stamp("COMPUTE_START", t.start)
            for name, datatype, array in inputs:
                entries.append(_tensor_entry(tid, "TENSOR_BACKEND_INPUT", name, datatype, array))
            stamp("COMPUTE_INPUT_END", t.input_end)
            stamp("COMPUTE_OUTPUT_START", t.infer_end)
            if self._tensors:
                for name, (datatype, array) in self._outputs.items():
                    entries.append(
                        _tensor_entry(tid, "TENSOR_BACKEND_OUTPUT", name, datatype, array)
                    )
            stamp("COMPUTE_END", t.end)
        stamp("REQUEST_END", end)
        if not child:
            stamp("GRPC_SEND_START", end)
            stamp("GRPC_SEND_END", time.monotonic_ns())
        return ",".join(entries)
