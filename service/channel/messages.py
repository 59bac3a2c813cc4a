"""The descriptors: requests and responses as plain tuples, tensor bytes as slab blocks.

Requests, inputs, requested outputs and responses are encoded field by field from their
dataclass definitions (``types.py``), so a field added there crosses without a change
here; only the tensor bytes get special handling (``InputTensor.raw``, ``OutputTensor``'s
array). A tensor's bytes are either inline (``bytes``, small or what no block could
hold) or ``(offset, nbytes)`` in the writer's arena. An output the engine found to be
bytes of one of its own request's input blocks (an identity, a pass-through) goes back as
``(offset, nbytes, ECHO)``: the frontend has those bytes already, so the engine copies
nothing and the frontend has no block of the engine's to give back (decision 076).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import numpy as np

from wire import datatypes

from ..types import InferRequest, InferResponse, InputTensor, OutputTensor, RequestedOutput
from .leases import LEASE_MIN_BYTES
from .slabs import INLINE_MAX, Arena, ArenaMap

__all__ = [
    "CALL",
    "CANCEL",
    "ECHO",
    "END",
    "ERROR",
    "EVENT",
    "FREE",
    "INFER",
    "ITEM",
    "REPLY",
    "RESULT",
    "STREAM",
    "Echo",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
]

# Frontend -> engine
INFER = 1  # (INFER, rid, request, trace carrier or None, core.checked.Checked or None)
STREAM = 2  # (STREAM, rid, request, trace carrier or None, None)
CANCEL = 3  # (CANCEL, rid)
CALL = 4  # (CALL, rid, method name, args)
FREE = 5  # (FREE, [offsets]): response blocks the frontend has copied out
# Engine -> frontend; every rid ends with exactly one of RESULT, END, ERROR, REPLY
RESULT = 11  # (RESULT, rid, response)
ITEM = 12  # (ITEM, rid, response): one response of a stream
END = 13  # (END, rid): the stream is complete
ERROR = 14  # (ERROR, rid, exception or None when the request was cancelled)
REPLY = 15  # (REPLY, rid, value)
EVENT = 16  # (EVENT, kind, value): settings, models and shutdown broadcast to frontends
#: The third item of an output's ``(offset, nbytes, ECHO)``: bytes of the frontend's own
#: arena, in one of the answered request's input blocks.
ECHO = 0


def _names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


_REQUEST = _names(InferRequest)
_INPUT = _names(InputTensor)
_OUTPUT_REQ = _names(RequestedOutput)
# ``timings`` stays in the engine: spans are made there, where the timings are.
_RESPONSE = [n for n in _names(InferResponse) if n != "timings"]
# Where ``timings`` goes back in (as None) when a response is built positionally.
_RESP_TIMINGS = _names(InferResponse).index("timings")

_get_request = operator.attrgetter(*_REQUEST)
_get_input = operator.attrgetter(*_INPUT)
_get_output_req = operator.attrgetter(*_OUTPUT_REQ)
_get_response = operator.attrgetter(*_RESPONSE)
_REQ_INPUTS = _REQUEST.index("inputs")
_REQ_OUTPUTS = _REQUEST.index("outputs")
_RAW = _INPUT.index("raw")
_RESP_OUTPUTS = _RESPONSE.index("outputs")
_EMPTY = np.zeros((), dtype=np.uint8)
_SHAPES: dict[tuple[int, ...], Any] = {}  # shape -> a zero-byte array of that shape


def _shape_carrier(shape: tuple[int, ...]) -> Any:
    """An array with ``shape`` and no memory (for ``OutputTensor.shape``); cached, since
    a model's output shapes repeat and making one costs more than the rest of a decode."""
    carrier = _SHAPES.get(shape)
    if carrier is None:
        if len(_SHAPES) >= 4096:
            _SHAPES.clear()
        carrier = _SHAPES[shape] = np.broadcast_to(_EMPTY, shape)
    return carrier


def _place(
    arena: Arena,
    data: bytes | memoryview,
    blocks: list[int],
    sources: list[tuple[int, bytes | memoryview]] | None = None,
) -> Any:
    """Inline bytes, or the block (offset, nbytes) ``data`` was copied into; ``sources``
    collects (offset, ``data``) of each block written."""
    size = len(data)
    if size <= INLINE_MAX:
        return data if isinstance(data, bytes) else bytes(data)
    offset = arena.alloc(size)
    if offset < 0:
        return bytes(data)
    arena.write(offset, data)
    blocks.append(offset)
    if sources is not None:
        sources.append((offset, data))
    return (offset, size)


def encode_request(
    request: InferRequest,
    arena: Arena,
    blocks: list[int],
    sources: list[tuple[int, bytes | memoryview]] | None = None,
) -> list[Any]:
    """``blocks`` collects the arena blocks used, to free once the engine is done;
    ``sources`` (offset, bytes written there) of each, to read an echoed output from."""
    values = list(_get_request(request))
    inputs = []
    for tensor in request.inputs:
        item = list(_get_input(tensor))
        raw = item[_RAW]
        if raw is not None:
            item[_RAW] = _place(arena, raw, blocks, sources)
        inputs.append(item)
    values[_REQ_INPUTS] = inputs
    values[_REQ_OUTPUTS] = [_get_output_req(o) for o in request.outputs]
    return values


def decode_request(
    values: list[Any], arena: ArenaMap, blocks: list[tuple[int, int]] | None = None
) -> InferRequest:
    """``blocks`` collects the (offset, nbytes) of the input blocks, for ``Echo``."""
    inputs = []
    for item in values[_REQ_INPUTS]:
        raw = item[_RAW]
        if type(raw) is tuple:
            item[_RAW] = arena.block(raw[0], raw[1])
            if blocks is not None:
                blocks.append(raw)
        inputs.append(InputTensor(*item))
    values[_REQ_INPUTS] = inputs
    values[_REQ_OUTPUTS] = [RequestedOutput(*o) for o in values[_REQ_OUTPUTS]]
    return InferRequest(*values)


class Echo:
    """The input blocks of the request being answered, in the frontend's arena as the
    engine maps it: an output lying inside one of them goes back as a reference to the
    frontend's own bytes (``(offset, nbytes, ECHO)``), not copied into a block."""

    __slots__ = ("arena", "blocks")

    def __init__(self, arena: ArenaMap, blocks: list[tuple[int, int]]) -> None:
        self.arena = arena
        self.blocks = blocks

    def find(self, array: Any) -> tuple[int, int, int] | None:
        """``array``'s bytes as a reference into an input block, or None. Its wire bytes
        are its memory (C order), so only a C-contiguous array qualifies."""
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
            return None
        offset = self.arena.offset_of(array.__array_interface__["data"][0])
        if offset < 0:
            return None
        end = offset + array.nbytes
        for start, size in self.blocks:
            if start <= offset and end <= start + size:
                return (offset, array.nbytes, ECHO)
        return None


def _output(tensor: OutputTensor, arena: Arena, echo: Echo | None = None) -> tuple[Any, ...]:
    """(name, datatype, shape, wire bytes or block): the engine writes the block in
    place, so a large output is copied once, into shared memory; an output that is its
    request's input, not at all (``Echo``)."""
    array = tensor.array
    shape = array.shape  # already a tuple of ints
    if tensor.wire is not None:  # already in wire form (b"" when written to shared memory)
        data: Any = tensor.wire
    elif tensor.datatype == "BYTES":
        data = datatypes.serialize_bytes_tensor(array)
    elif array.nbytes <= INLINE_MAX:
        data = array.tobytes()  # C order whatever the layout
    else:
        if echo is not None:
            found = echo.find(array)
            if found is not None:
                return (tensor.name, tensor.datatype, shape, found)
        offset = arena.alloc(array.nbytes)
        if offset < 0:
            data = array.tobytes()
        else:
            target = np.frombuffer(arena.view, np.uint8, array.nbytes, offset)
            np.copyto(target.view(array.dtype).reshape(array.shape), array, casting="no")
            return (tensor.name, tensor.datatype, shape, (offset, array.nbytes))
    if len(data) > INLINE_MAX:
        data = _place(arena, data, [])
    return (tensor.name, tensor.datatype, shape, data)


def encode_response(response: InferResponse, arena: Arena, echo: Echo | None = None) -> list[Any]:
    """``echo``: the request's input blocks, for outputs that are views of them."""
    values = list(_get_response(response))
    values[_RESP_OUTPUTS] = [_output(t, arena, echo) for t in response.outputs]
    return values


def _array(datatype: str, shape: tuple[int, ...], data: bytes | memoryview) -> Any:
    """The output's values over its wire bytes (no copy), for handlers that read them
    (the v1 API's classification and batch splitting); BYTES are split into items."""
    dtype = _DTYPES.get(datatype)
    try:
        if dtype is not None:
            # dtype positional: numpy parses a keyword argument at twice the cost
            return np.frombuffer(data, dtype).reshape(shape)
        if datatype == "BYTES":
            count = 1
            for d in shape:
                count *= d
            return datatypes.deserialize_bytes_tensor(data, count).reshape(shape)
    except ValueError:
        pass
    return _shape_carrier(shape)


#: Each fixed-size datatype's numpy dtype (BYTES has none: its items are split).
_DTYPES = {name: spec.numpy for name, spec in datatypes.DATATYPES.items() if name != "BYTES"}


def decode_response(
    values: list[Any],
    arena: ArenaMap,
    freed: list[int],
    lease: Callable[[int, int], memoryview] | None = None,
    echoed: Callable[[int, int], bytes | memoryview] | None = None,
) -> InferResponse:
    """Outputs come out as wire bytes (copied out of the arena; the block offsets go to
    ``freed`` for the engine to reuse); their arrays only carry the shape. With ``lease``,
    a large output is a view of its block instead, freed when unused (``leases.py``).
    ``echoed`` gives the bytes of an ``ECHO`` output from the frontend's own; without it
    one is an error (the engine echoes only unary answers)."""
    outputs = []
    for name, datatype, shape, data in values[_RESP_OUTPUTS]:
        if type(data) is tuple:
            if len(data) == 3:
                if echoed is None:
                    raise ValueError(f"output '{name}': an echo where none was expected")
                data = echoed(data[0], data[1])
                outputs.append(OutputTensor(name, datatype, _array(datatype, shape, data), data))
                continue
            offset, size = data
            if lease is not None and size >= LEASE_MIN_BYTES:
                data = lease(offset, size)
            else:
                data = bytes(arena.block(offset, size))
                freed.append(offset)
        outputs.append(OutputTensor(name, datatype, _array(datatype, shape, data), data))
    values[_RESP_OUTPUTS] = outputs
    # Positionally, ``timings`` (never sent) as None: a keyword dict per response cost
    # more than the rest of building it.
    values.insert(_RESP_TIMINGS, None)
    return InferResponse(*values)
