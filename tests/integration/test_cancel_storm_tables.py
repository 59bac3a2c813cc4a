"""A storm of expired and cancelled requests leaves nothing behind in the channel between
the frontends and the engine (the default layout, ``--frontends 2``).

Before, a request whose CANCEL the engine read together with the request itself (frames
queue in the socket while the engine is busy; a 1 ms deadline passes as the frontend
sends) got a task that was cancelled before its first step: its body never ran, so it
never answered and never left the engine's table, and the frontend kept its entry and
the request's slab block as long as both processes ran: 12 to 59 entries after 12 rounds
of 1,600 expired + 400 cancelled requests, none ever freed. Each frontend's table is
logged when it disconnects (``--log-verbose 1``); after a graceful stop nothing may be
left in it. ``tests/unit/test_engine_channel.py`` has the deterministic case.
"""

from __future__ import annotations

import asyncio
import random
import re
from pathlib import Path

import numpy as np
from cancel_storm import storm_round
from server_process import ServerProcess
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

ROUNDS = 5
EXPIRED = 1600  # per round, with a 1 ms deadline
CANCELLED = 400  # per round, cancelled 0-6 ms after they are sent
NORMAL = 200  # per round, no deadline, on a connection of their own: all must succeed
CONCURRENCY = 512
WIDTH = 16 * 1024  # FP32 elements: 64 KiB, so each such input takes a slab block

_IDENTITY = """
name: "{name}" backend: "identity" max_batch_size: {mbs}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "execute_delay_ms" value {{ string_value: "3" }} }}
{extra}
"""
MODELS = {
    "batched": (8, "dynamic_batching { max_queue_delay_microseconds: 3000 }"),
    "plain": (0, ""),  # the default scheduler
}


def _repository(root: Path) -> Path:
    for name, (mbs, extra) in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(_IDENTITY.format(name=name, mbs=mbs, extra=extra))
    return root


def _request(model: str, width: int) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="INPUT0", datatype="FP32")
    tensor.shape.extend([1, width] if MODELS[model][0] else [width])
    request.raw_input_contents.append(np.ones(width, np.float32).tobytes())
    return request


def test_no_request_is_left_in_the_channel_tables_after_a_cancel_storm(
    tmp_path: Path,
) -> None:
    server = ServerProcess(
        [_repository(tmp_path)], extra_args=["--frontends", "2", "--log-verbose", "1"]
    ).start()
    try:
        rng = random.Random(26)
        for _ in range(ROUNDS):
            requests = [_request(m, w) for m in MODELS for w in (4, WIDTH)]
            counts = {"expired": EXPIRED, "cancelled": CANCELLED, "normal": NORMAL}
            stub = pb_grpc.GRPCInferenceServiceStub
            tally = asyncio.run(storm_round(server.url, stub, requests, counts, CONCURRENCY, rng))
            assert tally.get("normal OK") == NORMAL, tally
            assert tally.get("expired DEADLINE_EXCEEDED", 0) > EXPIRED // 2, tally
    finally:
        code = server.stop()
    assert code == 0, server.log
    left = re.findall(
        r"frontend \d+ \(pid \d+\) disconnected, (\d+) requests in flight", server.log
    )
    assert len(left) == 2, server.log  # both frontends, once each
    assert left == ["0", "0"], f"requests left in the engine's tables: {left}"
