"""Round trips of one large tensor through tritonclient, one request at a time.

Run by ``big-tensors`` with the client environment's Python (``.venv-client``: what a
Triton user has; the server's environment has no tritonclient):

    python tensor_round_trips.py PROTOCOL URL MODEL MIB REPEATS

prints one JSON line: the seconds of each round trip (the first, which warms buffers on
both sides, is not among them) and whether every answer held the bytes sent.
Standard library, numpy and tritonclient only.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def main(protocol: str, url: str, model: str, mib: int, repeats: int) -> dict[str, object]:
    data = np.random.default_rng(mib).integers(0, 255, mib << 20, dtype=np.uint8)
    if protocol == "grpc":
        import tritonclient.grpc as client_module

        limit = (mib << 20) + (1 << 20)
        client = client_module.InferenceServerClient(
            url,
            channel_args=[
                ("grpc.max_send_message_length", limit),
                ("grpc.max_receive_message_length", limit),
            ],
        )
    else:
        import tritonclient.http as client_module  # type: ignore[no-redef]

        client = client_module.InferenceServerClient(url, network_timeout=600.0)
    tensor = client_module.InferInput("INPUT0", [data.size], "UINT8")
    tensor.set_data_from_numpy(data)
    wanted = [client_module.InferRequestedOutput("OUTPUT0")]
    seconds = []
    correct = True
    for index in range(repeats + 1):
        start = time.perf_counter()
        result = client.infer(model, [tensor], outputs=wanted)
        out = result.as_numpy("OUTPUT0")
        elapsed = time.perf_counter() - start
        correct = correct and out is not None and np.array_equal(out, data)
        del result, out
        if index:
            seconds.append(elapsed)
    client.close()
    return {"seconds": seconds, "correct": correct}


if __name__ == "__main__":
    protocol, url, model, mib, repeats = sys.argv[1:6]
    print(json.dumps(main(protocol, url, model, int(mib), int(repeats))))
