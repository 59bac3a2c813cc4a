"""What the legacy v1 API costs per request next to v2, on the same model and server.

Starts the server on the embedded repository (loopback, port 0), then sends the same
add_sub request (FP32 [1, 16]) as v1 ``Infer`` and as v2 ``ModelInfer`` with the
generated stubs, one request at a time, in alternating rounds so that machine noise falls
on both alike. Prints the median and mean round-trip of each and their ratio. Bounded:
``--requests`` per protocol (default 2000) and ``--seconds`` in all (default 60).

    .venv/bin/python -m loadtest v1-bench [--requests N] [--seconds S]
"""

from __future__ import annotations

import argparse
import statistics
import time

import grpc
import numpy as np
from server_process import ServerProcess

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from loadtest.scenario import Scenario, register
from trtis import api_pb2 as api
from trtis import grpc_service_pb2 as gs
from trtis import grpc_service_pb2_grpc as gs_grpc

ROUND = 50


def _requests() -> tuple[gs.InferRequest, pb.ModelInferRequest]:
    data = np.arange(16, dtype=np.float32).tobytes()
    H = api.InferRequestHeader
    v1 = gs.InferRequest(
        model_name="add_sub",
        model_version=-1,
        meta_data=H(
            batch_size=1,
            input=[H.Input(name="INPUT0", dims=[16]), H.Input(name="INPUT1", dims=[16])],
            output=[H.Output(name="OUTPUT0"), H.Output(name="OUTPUT1")],
        ),
        raw_input=[data, data],
    )
    tensor = pb.ModelInferRequest.InferInputTensor
    v2 = pb.ModelInferRequest(
        model_name="add_sub",
        inputs=[
            tensor(name="INPUT0", datatype="FP32", shape=[1, 16]),
            tensor(name="INPUT1", datatype="FP32", shape=[1, 16]),
        ],
        raw_input_contents=[data, data],
    )
    return v1, v2


@register
class V1Bench(Scenario):
    """The legacy v1 Infer against v2 ModelInfer: round trip on the same server."""

    name = "v1-bench"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--requests", type=int, default=2000)
        parser.add_argument("--seconds", type=float, default=60.0)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        v1_request, v2_request = _requests()
        times: dict[str, list[float]] = {"v1": [], "v2": []}
        with ServerProcess() as server, grpc.insecure_channel(server.url) as channel:
            v1 = gs_grpc.GRPCServiceStub(channel)
            v2 = pb_grpc.GRPCInferenceServiceStub(channel)
            assert v1.Infer(v1_request, timeout=30).request_status.code == 1  # SUCCESS; warm
            v2.ModelInfer(v2_request, timeout=30)
            deadline = time.monotonic() + args.seconds
            while len(times["v1"]) < args.requests and time.monotonic() < deadline:
                for name, call, message in (
                    ("v1", v1.Infer, v1_request),
                    ("v2", v2.ModelInfer, v2_request),
                ):
                    for _ in range(ROUND):
                        start = time.perf_counter()
                        call(message, timeout=30)
                        times[name].append(time.perf_counter() - start)
        for name, values in times.items():
            print(
                f"{name}: {len(values)} requests, median {statistics.median(values) * 1e6:.0f} us, "
                f"mean {statistics.fmean(values) * 1e6:.0f} us"
            )
        ratio = statistics.median(times["v1"]) / statistics.median(times["v2"])
        print(f"v1 / v2 median round trip: {ratio:.2f}")
        return 0
