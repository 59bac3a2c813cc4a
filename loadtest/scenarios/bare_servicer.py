"""The yardstick of cpu-bench: a bare grpc.aio GRPCInferenceService and nothing else.

Class-based, the generated stubs, numpy on ``raw_input_contents``; it knows ``add_sub*``
(OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1) and ``identity*`` (outputs = inputs)
by name, and counts successes for ModelStatistics so that cpu-bench counts them alike for
it and for ours. ``--model-thread`` (compute in one thread fed by a queue, as no model may
run on a loop's thread) and ``--onnxruntime`` (add_sub by an ONNX Runtime session) make it
the floors under a server that keeps this project's rules.

    .venv/bin/python -m loadtest bare-servicer --grpc-port 0 [--uvloop] [--model-thread]
        [--onnxruntime]  # logs the port
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import queue
import signal
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from loadtest.repository import ADD_SUB
from loadtest.scenario import Scenario, register

Context = grpc.aio.ServicerContext[Any, Any]
Output = pb.ModelInferResponse.InferOutputTensor
Compute = Callable[[bytes, bytes, list[int]], tuple[bytes, bytes]]


def numpy_add_sub(x: bytes, y: bytes, shape: list[int]) -> tuple[bytes, bytes]:
    a, b = np.frombuffer(x, np.float32), np.frombuffer(y, np.float32)
    return (a + b).tobytes(), (a - b).tobytes()


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
        future = loop.create_future()
        self._jobs.put((loop, future, (x, y, shape)))
        result: tuple[bytes, bytes] = await future
        return result


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


class BareServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, compute: Compute = numpy_add_sub, model_thread: bool = False) -> None:
        self.successes: Counter[str] = Counter()
        self._compute = compute
        self._thread = ModelThread(compute) if model_thread else None

    async def ModelInfer(
        self, request: pb.ModelInferRequest, context: Context
    ) -> pb.ModelInferResponse:
        name = request.model_name
        raw = list(request.raw_input_contents)  # each read of an element copies: read once
        if name.startswith("add_sub"):
            shape = list(request.inputs[0].shape)
            if self._thread is None:
                raw = list(self._compute(raw[0], raw[1], shape))
            else:
                raw = list(await self._thread(raw[0], raw[1], shape))
            outputs = [Output(name=f"OUTPUT{i}", datatype="FP32", shape=shape) for i in (0, 1)]
        elif name.startswith("identity"):
            outputs = [
                Output(
                    name="OUTPUT" + t.name.removeprefix("INPUT"), datatype=t.datatype, shape=t.shape
                )
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


async def serve(address: str, port: int, servicer: BareServicer) -> None:
    limit = 2**31 - 1
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.so_reuseport", 0),
        ]
    )
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

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        compute = onnxruntime_add_sub() if args.onnxruntime else numpy_add_sub
        servicer = BareServicer(compute, args.model_thread)
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        factory = None
        if args.uvloop:
            import uvloop

            factory = uvloop.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(serve(args.grpc_address, args.grpc_port, servicer))
        return 0
