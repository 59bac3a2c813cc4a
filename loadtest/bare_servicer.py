"""The baseline: a bare grpc.aio GRPCInferenceService servicer and nothing else.

Class-based, the generated stubs from ``inference``, numpy on ``raw_input_contents``.
It knows two kinds of model by name and nothing of configs, validation, schedulers or
statistics beyond one counter:

- ``add_sub*``: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (FP32);
- ``identity*``: OUTPUT<i> = INPUT<i>, bytes as they came.

ModelStatistics answers that counter (``inference_stats.success.count``,
``inference_count``, ``execution_count``) so the load drivers count successes the same
way for it as for the real server. The per-request cost of our server is compared with
this one's in the same run (``cpu_bench.py``): the gap is what our path adds over what
grpc.aio and numpy cost anyway.

    .venv/bin/python loadtest/bare_servicer.py --grpc-port 0 [--uvloop]  # logs the port
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections import Counter
from typing import Any

import grpc
import numpy as np

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc

Context = grpc.aio.ServicerContext[Any, Any]
OutputTensor = pb.ModelInferResponse.InferOutputTensor


class BareServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self) -> None:
        self.successes: Counter[str] = Counter()

    async def ModelInfer(
        self, request: pb.ModelInferRequest, context: Context
    ) -> pb.ModelInferResponse:
        name = request.model_name
        raw = list(request.raw_input_contents)  # each read of an element copies: read once
        if name.startswith("add_sub"):
            tensor = request.inputs[0]
            a = np.frombuffer(raw[0], np.float32)
            b = np.frombuffer(raw[1], np.float32)
            shape = list(tensor.shape)
            response = pb.ModelInferResponse(
                model_name=name,
                model_version="1",
                id=request.id,
                outputs=[
                    OutputTensor(name="OUTPUT0", datatype="FP32", shape=shape),
                    OutputTensor(name="OUTPUT1", datatype="FP32", shape=shape),
                ],
                raw_output_contents=[(a + b).tobytes(), (a - b).tobytes()],
            )
        elif name.startswith("identity"):
            response = pb.ModelInferResponse(
                model_name=name,
                model_version="1",
                id=request.id,
                outputs=[
                    OutputTensor(
                        name="OUTPUT" + t.name.removeprefix("INPUT"),
                        datatype=t.datatype,
                        shape=t.shape,
                    )
                    for t in request.inputs
                ],
                raw_output_contents=raw,
            )
        else:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model '{name}'")
        self.successes[name] += 1
        return response

    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Context
    ) -> pb.ModelStatisticsResponse:
        names = [request.name] if request.name else sorted(self.successes)
        reply = pb.ModelStatisticsResponse()
        for name in names:
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


async def serve(address: str, port: int) -> None:
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", 2**31 - 1),
            ("grpc.max_send_message_length", 2**31 - 1),
            ("grpc.so_reuseport", 0),
        ]
    )
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(BareServicer(), server)
    bound = server.add_insecure_port(f"{address}:{port}")
    await server.start()
    # The line our server logs, so one start-up helper serves both.
    logging.info("Started GRPCInferenceService at %s:%d", address, bound)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--grpc-address", default="127.0.0.1")
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--uvloop", action="store_true", help="run on uvloop (as our server does)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    factory = None
    if args.uvloop:
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(args.grpc_address, args.grpc_port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
