"""Per-call cost of each step a frontend runs for one ModelInfer (add_sub [1,16] FP32, raw
inputs, both outputs named), in this process with timeit: the steps cost-budget's
profile of a frontend names, without the load around them. The tree measured is the one
``service`` is imported from (``PYTHONPATH``; run as a script, so that the current
directory does not come first), so two trees compare by running it twice:

    PYTHONPATH=<tree>:<tree>/protos .venv/bin/python loadtest/frontend_calls.py

Prints one line per step: the best of 5 repeats, µs per call.
"""

from __future__ import annotations

import pickle
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import text_format

import service
from inference import grpc_service_pb2 as pb
from inference import model_config_pb2 as mc
from service.channel.messages import INFER, RESULT, decode_response, encode_request, encode_response
from service.channel.slabs import Arena, ArenaMap
from service.core.checked import ModelSnapshot
from service.core.shaping import shape_outputs
from service.grpc_frontend.codec import decode_infer_request, encode_unary_infer_response
from service.grpc_frontend.large_messages import serialize_infer_response
from service.types import InferResponse, OutputTensor

CALLS = 20000
ADD_SUB = Path(service.__file__).parent / "default_repository" / "add_sub"


def _request() -> bytes:
    request = pb.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="FP32")
        tensor.shape.extend([1, 16])
        request.raw_input_contents.append(np.arange(16, dtype="<f4").tobytes())
    for name in ("OUTPUT0", "OUTPUT1"):
        request.outputs.add(name=name)
    return request.SerializeToString()


def steps() -> list[tuple[str, Callable[[], Any]]]:
    config = text_format.Parse((ADD_SUB / "config.pbtxt").read_text(), mc.ModelConfig())
    models = ModelSnapshot()
    models.update({"add_sub": (1, {1: (1, config.SerializeToString(), False, {})})})
    message = pb.ModelInferRequest.FromString(_request())
    request = decode_infer_request(message)
    mark = models.mark(request)
    assert mark is not None
    arena = Arena(1 << 20, "frontend-calls")
    values = encode_request(request, arena, [])
    frame = [(INFER, 1, values, None, mark[0])]
    out = np.arange(16, dtype=np.float32).reshape(1, 16)
    outputs = [OutputTensor("OUTPUT0", "FP32", out), OutputTensor("OUTPUT1", "FP32", out + 1)]
    answer = pickle.dumps(
        [(RESULT, 1, encode_response(InferResponse("add_sub", "1", "", outputs), arena))]
    )
    responses = ArenaMap(arena.fd, arena.size)
    loaded = pickle.loads(answer)[0][2]
    response = decode_response(list(loaded), responses, [])
    return [
        ("decode_infer_request", lambda: decode_infer_request(message)),
        ("ModelSnapshot.mark", lambda: models.mark(request)),
        ("encode_request", lambda: encode_request(request, arena, [])),
        ("pickle.dumps (the frame)", lambda: pickle.dumps(frame, pickle.HIGHEST_PROTOCOL)),
        ("pickle.loads (the answer)", lambda: pickle.loads(answer)),
        ("decode_response", lambda: decode_response(list(loaded), responses, [])),
        ("shape_outputs", lambda: shape_outputs(mark[1], request, response.outputs)),
        (
            "encode_unary_infer_response + serialize",
            lambda: serialize_infer_response(encode_unary_infer_response(response, 1 << 31)),
        ),
    ]


def main() -> None:
    print(f"service from {Path(service.__file__).parent.parent}")
    total = 0.0
    for name, call in steps():
        best = min(timeit.repeat(call, number=CALLS, repeat=5)) / CALLS * 1e6
        total += best
        print(f"{name:42s} {best:6.2f} µs")
    print(f"{'sum':42s} {total:6.2f} µs")


if __name__ == "__main__":
    main()
