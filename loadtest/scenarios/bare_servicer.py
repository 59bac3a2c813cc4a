"""The yardstick of cpu-bench: a bare grpc.aio GRPCInferenceService and nothing else.

Class-based, the generated stubs, numpy on ``raw_input_contents``; it knows ``add_sub*``
(OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1) and ``identity*`` (outputs = inputs)
by name, and counts successes for ModelStatistics so that cpu-bench counts them alike for
it and for ours. It also serves Triton's ``simple`` (add_sub on INT32 [16] x 2, batch up
to 8) with the ModelMetadata and ModelConfig perf_analyzer reads first, so that
perf_analyzer's p50 at c=1 has grpc.aio's own floor beside ours and Triton's.
``--model-thread`` (compute in one thread fed by a queue, as no model may run on a loop's
thread), ``--onnxruntime`` (add_sub by an ONNX Runtime session) and ``--hop`` (that thread
in a second process behind a socket, as this project's engine behind its frontends;
``--hop-inline``: on that process's loop, no thread, as the engine runs a small model) make
it the floors under a server that keeps this project's rules.

    .venv/bin/python -m loadtest bare-servicer --grpc-port 0 [--uvloop] [--model-thread]
        [--onnxruntime] [--hop [--hop-inline]]  # logs the port
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import multiprocessing
import pickle
import queue
import signal
import socket
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from inference import model_config_pb2 as mc
from loadtest.loadgen import CHANNEL_OPTIONS
from loadtest.repository import ADD_SUB
from loadtest.scenario import Scenario, register

Context = grpc.aio.ServicerContext[Any, Any]
Output = pb.ModelInferResponse.InferOutputTensor
Compute = Callable[[bytes, bytes, list[int]], tuple[bytes, bytes]]


def numpy_add_sub(x: bytes, y: bytes, shape: list[int]) -> tuple[bytes, bytes]:
    a, b = np.frombuffer(x, np.float32), np.frombuffer(y, np.float32)
    return (a + b).tobytes(), (a - b).tobytes()


def numpy_add_sub_int32(x: bytes, y: bytes, shape: list[int]) -> tuple[bytes, bytes]:
    a, b = np.frombuffer(x, np.int32), np.frombuffer(y, np.int32)
    return (a + b).tobytes(), (a - b).tobytes()


SIMPLE = "simple"
SIMPLE_TENSORS = {"input": ("INPUT0", "INPUT1"), "output": ("OUTPUT0", "OUTPUT1")}


def simple_metadata() -> pb.ModelMetadataResponse:
    """Triton's answer for ``simple``: INT32 [-1, 16] in and out."""

    def tensors(kind: str) -> list[pb.ModelMetadataResponse.TensorMetadata]:
        return [
            pb.ModelMetadataResponse.TensorMetadata(name=n, datatype="INT32", shape=[-1, 16])
            for n in SIMPLE_TENSORS[kind]
        ]

    return pb.ModelMetadataResponse(
        name=SIMPLE, versions=["1"], platform="bare",
        inputs=tensors("input"), outputs=tensors("output"),
    )  # fmt: skip


def simple_config() -> pb.ModelConfigResponse:
    """What perf_analyzer needs of ``simple``'s config: batching up to 8, INT32 [16]."""
    config = mc.ModelConfig(name=SIMPLE, platform="bare", max_batch_size=8)
    for name in SIMPLE_TENSORS["input"]:
        config.input.add(name=name, data_type=mc.TYPE_INT32, dims=[16])
    for name in SIMPLE_TENSORS["output"]:
        config.output.add(name=name, data_type=mc.TYPE_INT32, dims=[16])
    return pb.ModelConfigResponse(config=config)


def onnxruntime_add_sub() -> Compute:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    path = str(ADD_SUB / "1" / "model.onnx")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def run(x: bytes, y: bytes, shape: list[int]) -> tuple[bytes, bytes]:
        feeds = {
            n: np.frombuffer(v, np.float32).reshape(shape)
            for n, v in (("INPUT0", x), ("INPUT1", y))
        }
        out0, out1 = session.run(["OUTPUT0", "OUTPUT1"], feeds)
        return out0.tobytes(), out1.tobytes()

    return run


class ModelThread:
    """One thread that runs the model; the loop hands it work and gets answers back."""

    def __init__(self, compute: Compute) -> None:
        self._compute = compute
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._work, name="model", daemon=True).start()

    def _work(self) -> None:
        while True:
            loop, future, args = self._jobs.get()
            loop.call_soon_threadsafe(_settle, future, self._compute(*args))

    async def __call__(self, x: bytes, y: bytes, shape: list[int]) -> tuple[bytes, bytes]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[bytes, bytes]] = loop.create_future()
        self._jobs.put((loop, future, (x, y, shape)))
        return await future


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # cancelled: its caller is gone
        future.set_result(result)


class Frames(asyncio.Protocol):
    """Length-prefixed pickle frames on a socket; what one loop iteration sends goes out as
    one frame (a call_soon'd flush), as the split layout's channel batches."""

    def __init__(self, on_message: Callable[[Any], object]) -> None:
        self._on_message = on_message
        self._buffer = bytearray()
        self._out: list[Any] = []
        self.closed = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while len(self._buffer) >= 4:
            end = 4 + int.from_bytes(self._buffer[:4], "little")
            if len(self._buffer) < end:
                break
            for message in pickle.loads(self._buffer[4:end]):
                self._on_message(message)
            del self._buffer[:end]

    def send(self, message: Any) -> None:
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(message)

    def _flush(self) -> None:
        frame = pickle.dumps(self._out, pickle.HIGHEST_PROTOCOL)
        self._out = []
        self.transport.write(len(frame).to_bytes(4, "little") + frame)


def _engine(sock: socket.socket, onnxruntime: bool, inline: bool = False) -> None:
    """The second process of ``--hop``: each (rid, x, y, shape) to a ModelThread (or, with
    ``inline``, computed on the loop's own thread, as this project's engine runs a small
    model: decision 067), (rid, outputs) back; it ends when the servicer's end of the
    socket closes."""
    import uvloop

    async def main() -> None:
        compute = onnxruntime_add_sub() if onnxruntime else numpy_add_sub
        model = None if inline else ModelThread(compute)
        tasks: set[asyncio.Task[None]] = set()  # held until done (the loop keeps weak refs)

        async def answer(rid: int, *args: Any) -> None:
            assert model is not None
            frames.send((rid, await model(*args)))

        def received(request: Any) -> None:
            if model is None:
                frames.send((request[0], compute(*request[1:])))
            else:
                task = loop.create_task(answer(*request))
                tasks.add(task)
                task.add_done_callback(tasks.discard)

        loop = asyncio.get_running_loop()
        frames = Frames(received)
        await loop.connect_accepted_socket(lambda: frames, sock)
        await frames.closed.wait()

    uvloop.run(main())


class Hop:
    """``--hop``: the model thread in a second process (spawned) behind a Unix socketpair;
    called as a ModelThread is, one future per request id."""

    def __init__(self) -> None:
        self._pending: dict[int, asyncio.Future[tuple[bytes, bytes]]] = {}
        self._ids = itertools.count()
        self._frames = Frames(lambda answer: _settle(self._pending.pop(answer[0]), answer[1]))

    @classmethod
    async def start(cls, onnxruntime: bool, inline: bool = False) -> Hop:
        hop, (mine, theirs) = cls(), socket.socketpair()
        spawn = multiprocessing.get_context("spawn")
        spawn.Process(target=_engine, args=(theirs, onnxruntime, inline), daemon=True).start()
        theirs.close()
        await asyncio.get_running_loop().connect_accepted_socket(lambda: hop._frames, mine)
        return hop

    def close(self) -> None:  # the second process ends when it sees the socket close
        self._frames.transport.close()

    async def __call__(self, x: bytes, y: bytes, shape: list[int]) -> tuple[bytes, bytes]:
        rid = next(self._ids)
        future = self._pending[rid] = asyncio.get_running_loop().create_future()
        self._frames.send((rid, x, y, shape))
        return await future


class BareServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, compute: Compute = numpy_add_sub, model_thread: bool = False) -> None:
        self.successes: Counter[str] = Counter()
        self._compute = compute
        self.model_thread: ModelThread | Hop | None = ModelThread(compute) if model_thread else None

    async def ModelInfer(
        self, request: pb.ModelInferRequest, context: Context
    ) -> pb.ModelInferResponse:
        name = request.model_name
        raw = list(request.raw_input_contents)  # each read of an element copies: read once
        if name == SIMPLE:
            shape = list(request.inputs[0].shape)
            raw = list(numpy_add_sub_int32(raw[0], raw[1], shape))
            outputs = [Output(name=f"OUTPUT{i}", datatype="INT32", shape=shape) for i in (0, 1)]
        elif name.startswith("add_sub"):
            shape = list(request.inputs[0].shape)
            if self.model_thread is None:
                raw = list(self._compute(raw[0], raw[1], shape))
            else:
                raw = list(await self.model_thread(raw[0], raw[1], shape))
            outputs = [Output(name=f"OUTPUT{i}", datatype="FP32", shape=shape) for i in (0, 1)]
        elif name.startswith("identity"):
            outputs = [
                Output(name=t.name.replace("INPUT", "OUTPUT"), datatype=t.datatype, shape=t.shape)
                for t in request.inputs
            ]
        else:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model '{name}'")
        self.successes[name] += 1
        return pb.ModelInferResponse(
            model_name=name, model_version="1", id=request.id, outputs=outputs,
            raw_output_contents=raw,
        )  # fmt: skip

    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Context
    ) -> pb.ModelStatisticsResponse:
        reply = pb.ModelStatisticsResponse()
        for name in [request.name] if request.name else sorted(self.successes):
            count = self.successes[name]
            stats = reply.model_stats.add(
                name=name, version="1", inference_count=count, execution_count=count
            )
            stats.inference_stats.success.count = count
        return reply

    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: Context
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Context
    ) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="bare", version="2.51.0")

    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Context
    ) -> pb.ModelMetadataResponse:
        await _only_simple(request.name, context)
        return simple_metadata()

    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: Context
    ) -> pb.ModelConfigResponse:
        await _only_simple(request.name, context)
        return simple_config()


async def _only_simple(name: str, context: Context) -> None:
    """NOT_FOUND for any model but ``simple``, the one whose metadata and config it has."""
    if name != SIMPLE:
        await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model '{name}'")


async def serve(address: str, port: int, servicer: BareServicer) -> None:
    server = grpc.aio.server(options=[*CHANNEL_OPTIONS, ("grpc.so_reuseport", 0)])
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"{address}:{port}")
    await server.start()
    # The line our server logs, so one start-up helper serves both.
    logging.info("Started GRPCInferenceService at %s:%d", address, bound)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1.0)


@register
class BareServicerScenario(Scenario):
    """The bare grpc.aio servicer cpu-bench compares ours with (serves until SIGTERM)."""

    name = "bare-servicer"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--grpc-address", default="127.0.0.1")
        p.add_argument("--grpc-port", type=int, default=8001)
        p.add_argument("--uvloop", action="store_true", help="run on uvloop (as our server does)")
        p.add_argument("--model-thread", action="store_true", help="compute in one thread")
        p.add_argument("--onnxruntime", action="store_true", help="add_sub by ONNX Runtime")
        p.add_argument("--hop", action="store_true", help="the model thread in a second process")
        p.add_argument(
            "--hop-inline", action="store_true", help="with --hop: no thread, on its loop"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        here = args.onnxruntime and not args.hop  # --hop: the second process runs the model
        servicer = BareServicer(onnxruntime_add_sub() if here else numpy_add_sub, args.model_thread)
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        factory = None
        if args.uvloop:
            import uvloop

            factory = uvloop.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            if args.hop:
                hop = Hop.start(args.onnxruntime, args.hop_inline)
                servicer.model_thread = runner.run(hop)
            runner.run(serve(args.grpc_address, args.grpc_port, servicer))
        return 0
