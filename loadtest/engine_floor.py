"""The engine loop's Python per unbatched request, piece by piece, warm (decision 072).

cost-budget and engine_wakeups measure the loop under load, where wake-ups and a shared
machine decide much of the figure; this times each piece of the path an ONNX add_sub
request takes through the engine's loop thread, in a tight loop of its own, in one
process (no socket, no frontend): the frame's unpickling, the request's decoding, the
lookup, the checked job, the execution (ONNX Runtime's own ``run`` and the glue around
it), the answer's encoding, and the whole path from a frame to the bytes written
(``FrontendConnection`` over a transport that only counts), with the request executed
on the loop (decision 067). Thread CPU time; the best of five runs, and their median.

    PYTHONPATH=.:protos .venv/bin/python -m loadtest.engine_floor
"""

from __future__ import annotations

import asyncio
import pickle
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from loadtest.repository import add_sub
from service import loop as service_loop
from service.channel.messages import INFER, RESULT, decode_request, encode_request, encode_response
from service.config import MetricsConfig, ServerConfig
from service.core.checked import ModelSnapshot, checked_job
from service.engine.connection import FrontendConnection
from service.runtime import Runtime
from service.scheduling.batch import execute_batch
from service.scheduling.inline import turn_of
from service.types import InferRequest, InputTensor

_HEADER = struct.Struct("<I")


def bench(label: str, fn: Callable[[], Any], n: int = 20000) -> None:
    runs = []
    for _ in range(5):
        start = time.thread_time()
        for _ in range(n):
            fn()
        runs.append((time.thread_time() - start) / n * 1e6)
    runs.sort()
    print(f"| {label} | {runs[0]:.2f} | {runs[2]:.2f} |")


class _Transport:
    """Counts what the engine writes."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    def close(self) -> None:
        pass


async def main() -> None:
    repo = Path(tempfile.mkdtemp(prefix="engine-floor-"))
    add_sub(repo, "add_sub")
    config = ServerConfig(model_repositories=(repo,), metrics=MetricsConfig(enabled=False))
    runtime = Runtime(config)
    assert await runtime.start_models()
    core = runtime.core
    snapshot = ModelSnapshot()
    snapshot.update(core.models_snapshot())
    data = np.ones((1, 16), np.float32).tobytes()
    inputs = [InputTensor(f"INPUT{i}", "FP32", (1, 16), raw=data) for i in (0, 1)]
    plain = InferRequest(model_name="add_sub", inputs=inputs)
    mark = snapshot.mark(plain)
    assert mark is not None
    checked = mark[0]
    messages = [(INFER, 1, encode_request(plain, None, []), None, checked)]  # type: ignore[arg-type]
    body = pickle.dumps(messages, protocol=pickle.HIGHEST_PROTOCOL)
    frame = _HEADER.pack(len(body)) + body
    model = core._models.get("add_sub")
    scheduler: Any = model.scheduler
    instance: Any = scheduler._pool.workers[0].instance
    request = decode_request(pickle.loads(body)[0][2], None)  # type: ignore[arg-type]
    job = checked_job(model, request, checked)
    turn = turn_of(asyncio.get_running_loop())

    print("| piece | best µs | median µs |")
    print("|---|--:|--:|")
    bench("unpickle a frame of one request", lambda: pickle.loads(body))
    bench("decode_request", lambda: decode_request(pickle.loads(body)[0][2], None))  # type: ignore[arg-type]
    bench("model lookup (`_unary_model`)", lambda: core._unary_model(request))
    bench("`checked_job`", lambda: checked_job(model, request, checked))
    bench("ONNX Runtime `_sess.run` (C++)", lambda: instance._session._sess.run(
        ["OUTPUT0", "OUTPUT1"], job.inputs, None))  # fmt: skip
    bench("ONNX Runtime `InferenceSession.run`", lambda: instance._session.run(
        ["OUTPUT0", "OUTPUT1"], job.inputs))  # fmt: skip
    bench("`OnnxRuntimeInstance.execute`", lambda: instance.execute(job.inputs, job.outputs))
    bench("`execute_batch` (one job)", lambda: execute_batch(instance, (job,)))

    answers: list[Any] = []
    scheduler.inline.open = True  # as once its executions were measured short

    def start() -> None:
        turn.spent = 0  # a new turn of the loop each time
        core.start_infer(request, lambda response, error: answers.append(response), checked)
        answers.clear()

    bench("`start_infer` .. answered (executed on the loop)", start, 5000)
    answered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    core.start_infer(request, lambda response, error: answered.set_result(response), checked)
    response = await answered  # at once here; a done-callback's turn later before 072
    bench("encode_response", lambda: encode_response(response, None))  # type: ignore[arg-type]
    answer = [(RESULT, 1, encode_response(response, None))]  # type: ignore[arg-type]
    bench("pickle an answer of one", lambda: pickle.dumps(answer, protocol=5))

    transport = _Transport()
    connection = FrontendConnection(
        "floor",
        core,
        runtime.tracing,
        lambda n, a: None,
        None,
        None,
        lambda c: None,  # type: ignore[arg-type]
    )
    connection.channel.connection_made(transport)  # type: ignore[arg-type]

    def whole() -> None:
        turn.spent = 0
        connection.channel.data_received(frame)
        connection.channel._flush()

    bench("frame read .. answer written (the whole path)", whole, 5000)
    assert transport.writes >= 25000
    await asyncio.sleep(0.1)
    await runtime.models.unload_all()


if __name__ == "__main__":
    service_loop.run(main())
