"""Outputs that are views of their request's inputs go back as echoes (decision 076):
the engine copies nothing into its response slab, and the frontend reads the bytes it
wrote into the input block, byte for byte what a copy would have carried."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

from service.channel.messages import (
    ECHO,
    Echo,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from service.channel.slabs import INLINE_MAX, Arena, ArenaMap
from service.errors import Internal
from service.frontend.client import EngineClient, _Pending
from service.types import InferRequest, InferResponse, InputTensor, OutputTensor

N = 1 << 18  # FP32 elements: 1 MiB


class Link:
    """A frontend's client (its request arena) and the engine's two maps, no sockets."""

    def __init__(self) -> None:
        self.client = EngineClient("unused", 0, arena_bytes=64 << 20)
        self.requests = ArenaMap(os.dup(self.client._arena.fd), self.client._arena.size)
        self.responses = Arena(64 << 20)  # the engine's, for this frontend
        self.back = ArenaMap(os.dup(self.responses.fd), self.responses.size)

    def send(self, *raws: bytes | memoryview) -> tuple[_Pending, InferRequest, Echo | None]:
        """A unary request with these FP32 inputs, as the engine decodes it."""
        entry = _Pending()
        entry.sources = []
        inputs = [
            InputTensor(f"INPUT{i}", "FP32", (len(r) // 4,), raw=r) for i, r in enumerate(raws)
        ]
        values = encode_request(
            InferRequest("identity", "", "", inputs),
            self.client._arena,
            entry.blocks,
            entry.sources,
        )
        blocks: list[tuple[int, int]] = []
        request = decode_request(values, self.requests, blocks)
        return entry, request, Echo(self.requests, blocks) if blocks else None

    def answer(self, entry: _Pending, echo: Echo | None, *arrays: np.ndarray) -> list[object]:
        """The engine's descriptor of each output, and the outputs the frontend reads."""
        outputs = [OutputTensor(f"OUTPUT{i}", "FP32", a) for i, a in enumerate(arrays)]
        values = encode_response(InferResponse("identity", "1", "", outputs), self.responses, echo)
        kinds = [o[3] for o in values[3]]
        echoed = functools.partial(self.client._echoed, entry)
        response = decode_response(values, self.back, [], None, echoed)
        return [kinds, response]

    def close(self) -> None:
        self.requests.close()
        self.back.close()
        self.responses.close()
        self.client._arena.close()


def _inputs(request: InferRequest) -> list[np.ndarray]:
    return [np.frombuffer(t.raw, np.float32) for t in request.inputs]  # type: ignore[arg-type]


def test_an_identity_output_is_echoed_not_copied() -> None:
    link = Link()
    data = np.random.default_rng(0).standard_normal(N).astype("<f4").tobytes()
    message = b"head" + data  # as grpc's message: the raw entry a view of its bytes
    entry, request, echo = link.send(memoryview(message)[4:])
    (array,) = _inputs(request)
    kinds, response = link.answer(entry, echo, array.reshape(512, 512))
    assert kinds == [(entry.blocks[0], len(data), ECHO)]
    # Nothing was written into the engine's response slab, so nothing is to be freed.
    assert link.responses.carved == 0 and link.responses.in_use == 0
    out = response.outputs[0]  # type: ignore[attr-defined]
    assert bytes(out.wire) == data and out.shape == (512, 512)
    assert isinstance(out.wire, memoryview) and out.wire.obj is message  # no copy made
    link.close()


def test_a_contiguous_part_of_an_input_is_echoed_from_its_offset() -> None:
    link = Link()
    data = np.arange(N, dtype="<f4").tobytes()
    entry, request, echo = link.send(data)
    (array,) = _inputs(request)
    part = array[N // 4 : N // 2]
    kinds, response = link.answer(entry, echo, part)
    assert kinds == [(entry.blocks[0] + N, part.nbytes, ECHO)]
    assert bytes(response.outputs[0].wire) == part.tobytes()  # type: ignore[attr-defined]
    link.close()


def test_what_is_not_a_contiguous_view_of_the_request_is_copied_as_before() -> None:
    link = Link()
    first = np.arange(N, dtype="<f4").tobytes()
    _, other, _ = link.send(first)  # another request in flight, its own block
    entry, request, echo = link.send(np.ones(N, "<f4").tobytes())
    (own,) = _inputs(request)
    (foreign,) = _inputs(other)
    strided = own[::2]
    fresh = own * 2
    kinds, response = link.answer(entry, echo, strided, fresh, foreign)
    assert all(len(k) == 2 for k in kinds)  # (offset, nbytes) blocks of the engine's
    assert link.responses.blocks_in_use == 3
    wires = [bytes(o.wire) for o in response.outputs]  # type: ignore[attr-defined]
    assert wires == [strided.tobytes(), fresh.tobytes(), first]
    link.close()


def test_a_mutable_source_is_copied_out_of_the_block() -> None:
    """A buffer its owner could write again (not a ``bytes``) is not lent to the answer:
    the echo is read from the frontend's own block, before that block is freed."""
    link = Link()
    buffer = bytearray(np.full(N, 7, "<f4").tobytes())
    entry, request, echo = link.send(memoryview(buffer))
    (array,) = _inputs(request)
    kinds, response = link.answer(entry, echo, array)
    assert kinds[0][2] == ECHO  # type: ignore[index]
    buffer[:4] = b"\0\0\0\0"
    wire = response.outputs[0].wire  # type: ignore[attr-defined]
    assert type(wire) is bytes and wire == np.full(N, 7, "<f4").tobytes()
    link.close()


def test_small_outputs_stay_inline_and_streams_get_no_echo() -> None:
    link = Link()
    entry, request, echo = link.send(np.ones(N, "<f4").tobytes())
    (array,) = _inputs(request)
    small = array[: INLINE_MAX // 4]
    kinds, _ = link.answer(entry, echo, small)
    assert kinds == [small.tobytes()]
    # A stream's items are decoded without an ``echoed``: the engine never echoes them,
    # and an echo there is refused rather than read from nowhere.
    values = encode_response(
        InferResponse("identity", "1", "", [OutputTensor("OUTPUT0", "FP32", array)]),
        link.responses,
        echo,
    )
    with pytest.raises(ValueError, match="echo"):
        decode_response(values, link.back, [])
    link.close()


def test_a_cancelled_request_has_no_bytes_left_to_echo() -> None:
    link = Link()
    entry, _, _ = link.send(np.ones(N, "<f4").tobytes())
    entry.sources = None  # what EngineClient._cancel does
    with pytest.raises(Internal, match="no input block"):
        link.client._echoed(entry, entry.blocks[0], N * 4)
    link.close()
