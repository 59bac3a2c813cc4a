"""IO binding and CUDA-graph runners, exercised on the CPU provider (the same calls a CUDA
session gets, with device "cpu"), and pinned staging against a fake CUDA runtime."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from models import mlp_model, mlp_reference

from service.backends.base import InstanceSpec
from service.backends.onnxruntime.backend import OnnxRuntimeInstance
from service.backends.onnxruntime.binding import BoundRunner, GraphRunner, PinnedBuffers

WIDTH, LAYERS = 16, 2


@pytest.fixture(scope="module")
def session() -> ort.InferenceSession:
    model = mlp_model(width=WIDTH, layers=LAYERS)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _x(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((rows, WIDTH), dtype=np.float32)


def _expect(x: np.ndarray) -> np.ndarray:
    return mlp_reference(x, WIDTH, LAYERS)


def test_bound_runner_matches_run_and_keeps_earlier_results(session: ort.InferenceSession) -> None:
    runner = BoundRunner(session)
    x1, x2 = _x(3, 1), _x(3, 2)
    first = runner.run({"INPUT0": x1}, ["OUTPUT0"])[0]
    second = runner.run({"INPUT0": x2}, ["OUTPUT0"])[0]
    np.testing.assert_allclose(first, _expect(x1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second, _expect(x2), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(first, session.run(["OUTPUT0"], {"INPUT0": x1})[0])


def test_graph_runner_one_graph_per_shape(session: ort.InferenceSession) -> None:
    runner = GraphRunner(session, device="cpu", max_graphs=2)
    kept = []
    for step, rows in enumerate([4, 4, 2, 4, 2, 7, 7, 4]):
        x = _x(rows, step)
        out = runner.run({"INPUT0": x}, ["OUTPUT0"])[0]
        kept.append((x, out))
        np.testing.assert_allclose(out, _expect(x), rtol=1e-5, atol=1e-5)
    assert runner.graph_count == 2  # shapes 4 and 2; 7 is past max_graphs and runs plainly
    for x, out in kept:  # a replay must not overwrite what an earlier call returned
        np.testing.assert_allclose(out, _expect(x), rtol=1e-5, atol=1e-5)
    runner.close()
    assert runner.graph_count == 0


def test_instance_executes_through_its_runner(session: ort.InferenceSession) -> None:
    spec = InstanceSpec("m_0_0", "KIND_CPU", 0, 1)
    calls: list[tuple[str, ...]] = []

    class Recording(BoundRunner):
        def run(self, feeds: Any, outputs: Any) -> list[np.ndarray]:
            calls.append(tuple(outputs))
            return super().run(feeds, outputs)

    instance = OnnxRuntimeInstance("m", spec, session, Recording(session))
    x = _x(5, 9)
    out = instance.execute({"INPUT0": x}, ["OUTPUT0"])
    np.testing.assert_allclose(out["OUTPUT0"], _expect(x), rtol=1e-5, atol=1e-5)
    assert calls == [("OUTPUT0",)]


class FakeCudart:
    """cudaHostAlloc / cudaFreeHost over ctypes buffers; counts what it hands out."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.live: dict[int, Any] = {}
        self.allocations: list[int] = []

    def cudaHostAlloc(self, size: int, flags: int) -> tuple[int, int]:
        if self.fail:
            return 2, 0  # cudaErrorMemoryAllocation
        buffer = (ctypes.c_uint8 * size)()
        pointer = ctypes.addressof(buffer)
        self.live[pointer] = buffer
        self.allocations.append(size)
        return 0, pointer

    def cudaFreeHost(self, pointer: int) -> tuple[int]:
        del self.live[pointer]
        return (0,)


def test_pinned_buffers_reused_and_grown() -> None:
    runtime = FakeCudart()
    pinned = PinnedBuffers(runtime)
    assert pinned.available
    small, large = _x(2, 0), _x(8, 1)
    staged = pinned.stage("INPUT0", small)
    np.testing.assert_array_equal(staged, small)
    assert ctypes.addressof(ctypes.c_uint8.from_buffer(staged)) in runtime.live
    pinned.stage("INPUT0", _x(1, 3))  # fits: no new allocation
    assert runtime.allocations == [small.nbytes]
    np.testing.assert_array_equal(pinned.stage("INPUT0", large), large)
    assert runtime.allocations == [small.nbytes, large.nbytes] and len(runtime.live) == 1
    strings = np.array([b"a"], dtype=np.object_)
    assert pinned.stage("TEXT", strings) is strings  # object arrays never go to the device
    pinned.close()
    assert runtime.live == {}


def test_pinned_buffers_fall_back_to_pageable(caplog: pytest.LogCaptureFixture) -> None:
    x = _x(2, 0)
    assert PinnedBuffers(FakeCudart(fail=True)).stage("INPUT0", x) is x
    assert "cudaHostAlloc" in caplog.text


def test_bound_runner_with_pinned_staging(session: ort.InferenceSession) -> None:
    runtime = FakeCudart()
    runner = BoundRunner(session, pinned=PinnedBuffers(runtime))
    x = _x(4, 5)
    np.testing.assert_allclose(
        runner.run({"INPUT0": x}, ["OUTPUT0"])[0], _expect(x), rtol=1e-5, atol=1e-5
    )
    runner.close()
    assert runtime.live == {}
