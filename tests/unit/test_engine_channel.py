"""The frontend/engine channel in one process: a real engine server over a real
``InferenceServer`` and ONNX model, a real ``EngineClient``, a real Unix socket and
memfd slabs; only gRPC is absent."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import models
import numpy as np
import pytest
from test_shm_registry import Segment

from service.channel.messages import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from service.channel.slabs import INLINE_MAX, Arena, ArenaMap
from service.core.inference_server import InferenceServer
from service.core.lifecycle import ControlMode, ModelManager
from service.engine.channel_server import EngineServer
from service.errors import AlreadyExists, Internal, InvalidArgument, NotFound
from service.frontend.client import EngineClient
from service.scheduling.default import DefaultScheduler
from service.telemetry.settings import TraceSettings
from service.telemetry.tracing import Tracing
from service.types import InferRequest, InferResponse, InputTensor, OutputTensor, RequestedOutput

WIDTH = 16 * 1024  # FP32 elements: 64 KiB per tensor, so every input takes a slab block


def _repository(root: Path) -> Path:
    dims = [("INPUT0", "FP32", [-1])]
    out = [("OUTPUT0", "FP32", [-1])]
    models.write_model(
        root,
        "identity",
        models.identity_model("FP32", ["batch", "n"]),
        models.make_config("identity", dims, out, max_batch_size=8),
    )
    models.write_model(
        root,
        "held",
        models.identity_model("FP32", ["batch", "n"]),
        models.make_config(
            "held",
            dims,
            out,
            max_batch_size=64,
            extra="dynamic_batching { max_queue_delay_microseconds: 3000000 "
            "preferred_batch_size: [ 64 ] }",
        ),
    )
    return root


@dataclasses.dataclass
class Rig:
    client: EngineClient
    engine: EngineServer
    core: InferenceServer


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    manager = ModelManager([_repository(tmp_path)], mode=ControlMode.NONE)
    core = InferenceServer(manager)
    await manager.start()
    address = f"\0test-engine-{os.getpid()}-{secrets.token_hex(4)}"
    engine = EngineServer(address, core, Tracing(TraceSettings()), None, arena_bytes=16 << 20)
    await engine.start()
    client = EngineClient(address, 1, arena_bytes=16 << 20)
    await client.connect()
    yield Rig(client, engine, core)
    client.close()
    await engine.close()
    await manager.unload_all()


def _request(model: str, array: np.ndarray, request_id: str = "") -> InferRequest:
    return InferRequest(
        model_name=model,
        id=request_id,
        inputs=[InputTensor("INPUT0", "FP32", array.shape, raw=array.tobytes())],
    )


async def test_large_and_small_tensors_cross_exactly(rig: Rig) -> None:
    for width in (4, WIDTH):
        data = np.random.default_rng(width).random((2, width), dtype=np.float32)
        response = await rig.client.infer(_request("identity", data, "r1"))
        assert response.id == "r1"
        (output,) = response.outputs
        assert output.wire == data.tobytes()
        assert output.shape == (2, width)
    assert rig.client.slab_bytes_in_use == 0


async def test_errors_keep_their_class_and_text(rig: Rig) -> None:
    with pytest.raises(NotFound, match="nope"):
        await rig.client.infer(_request("nope", np.ones((1, 4), np.float32)))
    with pytest.raises(InvalidArgument, match=r"^\[request id: x\] "):
        bad = _request("identity", np.ones((1, 4), np.float32), "x")
        bad.inputs[0].datatype = "INT8"
        await rig.client.infer(bad)


async def test_control_calls_are_forwarded_by_name(rig: Rig) -> None:
    assert await rig.client.is_ready()
    meta = await rig.client.model_metadata("identity")
    assert meta.name == "identity" and meta.inputs[0].name == "INPUT0"
    config = await rig.client.model_config("identity")
    assert config.max_batch_size == 8
    await rig.client.infer(_request("identity", np.ones((1, 4), np.float32)))
    (stats,) = await rig.client.model_statistics("identity")
    assert stats.stats.inference_count == 1 and stats.stats.observer is None


async def test_no_slab_leak_after_10000_failed_and_many_cancelled_requests(rig: Rig) -> None:
    """Failures (validation) and cancellations (queued, then the caller leaves) both give
    their slab blocks back; the arena never grows past what was in flight at once."""
    client = rig.client
    data = np.ones((1, WIDTH), np.float32)
    for _ in range(100):
        batch = []
        for i in range(100):
            request = _request("identity", data, str(i))
            request.inputs[0].shape = (1, WIDTH + 1)  # byte size no longer matches
            batch.append(client.infer(request))
        results = await asyncio.gather(*batch, return_exceptions=True)
        assert all(isinstance(r, InvalidArgument) for r in results)
    held = [asyncio.ensure_future(client.infer(_request("held", data))) for _ in range(50)]
    await asyncio.sleep(0.2)  # queued in the engine's batcher
    for task in held:
        task.cancel()
    await asyncio.gather(*held, return_exceptions=True)
    for _ in range(100):  # the engine's terminal messages for the cancelled ones
        if client.inflight == 0:
            break
        await asyncio.sleep(0.02)
    assert client.inflight == 0
    assert client.slab_bytes_in_use == 0
    assert client.slab_bytes_carved <= 100 * 128 * 1024  # reuse, not growth
    (connection,) = rig.engine.connections
    assert connection.inflight == 0 and connection.response_slab_bytes == 0
    response = await client.infer(_request("identity", data))  # still serving
    assert response.outputs[0].wire == data.tobytes()


@pytest.mark.parametrize("kind", ["unary", "stream"])
async def test_a_request_whose_cancel_is_read_with_it_still_ends(rig: Rig, kind: str) -> None:
    """The caller leaves the moment its request is sent, so the engine reads the request
    and its CANCEL in one go (in a server: frames queue in the socket while the engine is
    busy). A stream request's task is cancelled before it ever ran; a unary request is
    already queued in its scheduler (it is started as its frame is read) and dropped
    there. Either still answers (ERROR) and leaves both tables; before, all 20 stream
    requests stayed in each, with their slab blocks."""
    client = rig.client
    for _ in range(100):  # the engine takes the channel a moment after the handshake
        if rig.engine.connections:
            break
        await asyncio.sleep(0.01)
    (connection,) = rig.engine.connections
    data = np.ones((1, WIDTH), np.float32)

    async def call() -> None:
        if kind == "unary":
            await client.infer(_request("held", data))
        else:
            async for _ in client.stream_infer(_request("held", data)):
                pass

    for _ in range(20):
        task = asyncio.ensure_future(call())
        await asyncio.sleep(0)  # sent...
        task.cancel()  # ...and its caller gone at once
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for _ in range(100):
        if client.inflight == 0 and connection.inflight == 0:
            break
        await asyncio.sleep(0.01)
    assert (client.inflight, connection.inflight, client.slab_bytes_in_use) == (0, 0, 0)
    (stats,) = await client.model_statistics("held")
    # Unary: each reached the batcher and was dropped as cancelled, as Triton counts a
    # request cancelled in its queue; stream: none reached the scheduler.
    assert stats.stats.cancelled == (20 if kind == "unary" else 0)
    assert stats.stats.execution_count == 0


async def test_a_request_run_on_the_loop_is_answered_before_start_infer_returns(
    rig: Rig,
) -> None:
    """A request its scheduler executed on the loop's thread (decision 067) is answered
    at once, not from a done-callback a turn of the loop later (decision 072): the call
    comes back settled, and the request is counted as any other."""
    data = np.ones((1, 4), np.float32)
    await rig.client.infer(_request("identity", data))  # the model's threads start
    scheduler = rig.core._models.get("identity").scheduler
    assert isinstance(scheduler, DefaultScheduler) and scheduler.inline is not None
    scheduler.inline.open = True  # as once its executions were measured short
    answers: list[tuple[object, object]] = []
    call = rig.core.start_infer(
        _request("identity", data, "now"), lambda response, error: answers.append((response, error))
    )
    assert call is not None and call.settled
    ((response, error),) = answers
    assert error is None and isinstance(response, InferResponse) and response.id == "now"
    assert response.outputs[0].array.tobytes() == data.tobytes()
    (stats,) = await rig.client.model_statistics("identity")
    assert (stats.stats.inference_count, stats.stats.execution_count) == (2, 2)
    assert scheduler.inflight == 0 and scheduler.inline.inline_runs == 1


async def test_frontend_gone_cancels_its_requests_in_the_engine(rig: Rig) -> None:
    data = np.ones((1, 4), np.float32)
    held = [asyncio.ensure_future(rig.client.infer(_request("held", data))) for _ in range(5)]
    await asyncio.sleep(0.2)
    (connection,) = rig.engine.connections
    assert connection.inflight == 5
    rig.client.close()
    await asyncio.wait_for(connection.closed, 5)
    for _ in range(50):
        if connection.inflight == 0:
            break
        await asyncio.sleep(0.02)
    assert connection.inflight == 0
    results = await asyncio.gather(*held, return_exceptions=True)
    assert all(isinstance(r, Exception) for r in results)


def _shm_request(model: str, key: str, shape: tuple[int, ...], out: bool = True) -> InferRequest:
    """INPUT0 read from region ``key`` at offset 0; OUTPUT0 written right after it."""
    size = 4 * int(np.prod(shape))
    place = {"shared_memory_region": key, "shared_memory_byte_size": size}
    outputs = [RequestedOutput("OUTPUT0", {**place, "shared_memory_offset": size})] if out else []
    return InferRequest(
        model_name=model,
        inputs=[InputTensor("INPUT0", "FP32", shape, parameters=dict(place))],
        outputs=outputs,
    )


async def test_shared_memory_regions_are_the_engines_and_bytes_never_cross(
    rig: Rig, tmp_path: Path
) -> None:
    """A region registered through one frontend serves requests from another; the input
    travels as a reference (no slab block in either direction), the engine reads it from
    the region and writes the output there, and the response carries no data for it."""
    other = EngineClient(rig.engine.address, 2, arena_bytes=16 << 20)
    await other.connect()
    segment = Segment(2 * 4 * WIDTH)
    try:
        data = np.random.default_rng(3).random((1, WIDTH), dtype=np.float32)
        segment.array(np.float32, WIDTH)[:] = data[0]
        await rig.client.register_system_shared_memory("r", segment.key, 0, 2 * 4 * WIDTH)
        with pytest.raises(AlreadyExists, match="'r' already in manager"):
            await other.register_system_shared_memory("r", segment.key, 0, 64)
        (status,) = await other.system_shared_memory_status()
        assert (status.name, status.key, status.byte_size) == ("r", segment.key, 2 * 4 * WIDTH)

        response = await other.infer(_shm_request("identity", "r", (1, WIDTH)))
        (output,) = response.outputs
        assert output.wire == b"" and output.shape == (1, WIDTH)
        np.testing.assert_array_equal(segment.array(np.float32, WIDTH, 4 * WIDTH), data[0])
        assert other.slab_bytes_carved == 0  # the input never entered the request slab
        assert all(c.response_slab_bytes == 0 for c in rig.engine.connections)
        assert sum(c._responses.carved for c in rig.engine.connections) == 0

        await other.unregister_system_shared_memory("r")
        assert await rig.client.system_shared_memory_status() == []
        with pytest.raises(NotFound):
            await rig.client.infer(_shm_request("identity", "r", (1, WIDTH)))
        assert await rig.client.cuda_shared_memory_status() == []
        await rig.client.unregister_cuda_shared_memory()  # nothing registered: succeeds
    finally:
        other.close()
        segment.close()


async def test_a_region_in_use_through_one_frontend_stays_until_its_request_ends(
    rig: Rig,
) -> None:
    """The in-use rule spans frontends; a request cancelled by its caller releases it."""
    other = EngineClient(rig.engine.address, 2, arena_bytes=16 << 20)
    await other.connect()
    segment = Segment(4096)
    try:
        await rig.client.register_system_shared_memory("held", segment.key, 0, 4096)
        request = _shm_request("held", "held", (1, 4), out=False)
        pending = asyncio.ensure_future(rig.client.infer(request))
        for _ in range(100):  # until the engine holds the region (the batcher waits 3 s)
            if sum(c.inflight for c in rig.engine.connections):
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        with pytest.raises(Internal, match="region 'held', it is currently in use"):
            await other.unregister_system_shared_memory("held")
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pending
        for _ in range(100):
            if not sum(c.inflight for c in rig.engine.connections):
                break
            await asyncio.sleep(0.01)
        await other.unregister_system_shared_memory("held")
        assert await rig.client.system_shared_memory_status() == []
    finally:
        other.close()
        segment.close()


def test_every_field_of_the_request_and_response_types_crosses() -> None:
    """Fields are encoded from the dataclass definitions: whatever others add crosses."""
    arena = Arena(4 << 20)
    reader = ArenaMap(os.dup(arena.fd), arena.size)
    big = np.arange(INLINE_MAX, dtype=np.float32)
    request = InferRequest(
        model_name="m",
        model_version="3",
        id="req",
        inputs=[
            InputTensor("A", "FP32", (1, INLINE_MAX), raw=big.tobytes(), parameters={"p": 1}),
            InputTensor("B", "INT32", (2,), contents=np.array([1, 2], np.int32)),
            InputTensor("C", "FP32", (1,), raw=b"\0\0\0\0"),
        ],
        outputs=[RequestedOutput("X", {"classification": 2})],
        parameters={"sequence_id": 7, "s": "v", "f": 0.5, "b": True},
    )
    blocks: list[int] = []
    decoded = decode_request(encode_request(request, arena, blocks), reader)
    assert len(blocks) == 1  # the large input only
    assert isinstance(decoded.inputs[0].raw, memoryview)
    decoded.inputs[0].raw = bytes(decoded.inputs[0].raw)
    contents = decoded.inputs[1].contents
    assert contents is not None and contents.tolist() == [1, 2]
    decoded.inputs[1].contents = request.inputs[1].contents
    assert decoded == request

    response = InferResponse(
        "m",
        "3",
        "req",
        [
            OutputTensor("X", "FP32", big.reshape(1, -1)),
            OutputTensor("S", "BYTES", np.array([b"ab", b"c"], dtype=np.object_)),
        ],
        parameters={"triton_final_response": True},
    )
    freed: list[int] = []
    back_arena = ArenaMap(os.dup(arena.fd), arena.size)
    out = decode_response(encode_response(response, arena), back_arena, freed)
    assert len(freed) == 1
    assert (out.model_name, out.model_version, out.id) == ("m", "3", "req")
    assert out.parameters == response.parameters
    assert [o.shape for o in out.outputs] == [(1, INLINE_MAX), (2,)]
    assert out.outputs[0].wire == big.tobytes()
    assert out.outputs[1].wire == b"\x02\0\0\0ab\x01\0\0\0c"
    # Fields these encoders name explicitly: a new one must be added there too.
    assert [f.name for f in dataclasses.fields(OutputTensor)] == [
        "name",
        "datatype",
        "array",
        "wire",
    ]
    reader.close()
    back_arena.close()


def test_frontends_flag(tmp_path: Path) -> None:
    from service.config import default_frontends, parse_args

    assert parse_args(["--model-repository", str(tmp_path)]).frontends == default_frontends()
    assert parse_args(["--model-repository", str(tmp_path), "--frontends", "0"]).frontends == 0
    with pytest.raises(SystemExit):
        parse_args(["--model-repository", str(tmp_path), "--frontends", "-1"])
    assert 1 <= default_frontends() <= (os.cpu_count() or 1)


def test_the_engines_switch_interval_comes_from_its_variable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SERVICE_ENGINE_SWITCH_INTERVAL_US (issue 25's many-core trial): µs, a positive
    whole number; anything else is said in the log and leaves the interval alone."""
    import sys

    from service.engine.main import set_switch_interval

    before = sys.getswitchinterval()
    try:
        assert set_switch_interval("") is None
        for bad in ("0", "0.2", "-5", "fast"):
            assert set_switch_interval(bad) is None
            assert f"SERVICE_ENGINE_SWITCH_INTERVAL_US={bad!r} ignored" in caplog.text
        assert sys.getswitchinterval() == before
        assert set_switch_interval("200") == pytest.approx(0.0002)
        assert sys.getswitchinterval() == pytest.approx(0.0002)
    finally:
        sys.setswitchinterval(before)
