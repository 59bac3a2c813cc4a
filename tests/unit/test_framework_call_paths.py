"""The framework backends' calls (decision 068): TensorFlow runs a callable made once per
(feeds, fetches) signature, not ``Session.run``; OpenVINO sets its inputs on the request and
runs it without handing it a dict; PyTorch sets the process-wide JIT settings only when they
change. Each instance is opened through its backend's class on the MLP ``framework-backends``
writes, and its outputs checked against the numpy reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from framework_support import need_framework
from google.protobuf import text_format
from models import mlp_reference

from inference import model_config_pb2 as mc
from loadtest import framework_mlp
from service.backends.base import InstanceSpec

WIDTH, LAYERS = 8, 2


def _open(backend: str, root: Path, threads: int, batching: bool, inter_op: int = 1) -> Any:
    """The MLP of ``backend`` written under ``root`` and opened as the server opens it."""
    folder = root / f"m_{backend}"
    (folder / "1").mkdir(parents=True)
    framework_mlp.WRITERS[backend](folder / "1" / framework_mlp.FILES[backend], WIDTH, LAYERS)
    text = framework_mlp.config(f"m_{backend}", backend, WIDTH, threads, 16, batching)
    inter = 'key: "TF_NUM_INTER_THREADS" value { string_value: "1" }'
    text = text.replace(inter, inter.replace('"1"', f'"{inter_op}"'))
    config = text_format.Parse(text, mc.ModelConfig())
    spec = InstanceSpec(name=f"m_{backend}_0", kind="KIND_CPU", device_id=0, threads=threads)
    if backend == "tensorflow":
        from service.backends.tensorflow.backend import TensorFlowBackend

        return TensorFlowBackend().open(config, folder / "1", spec)
    if backend == "openvino":
        from service.backends.openvino.backend import OpenVinoBackend

        return OpenVinoBackend().open(config, folder / "1", spec)
    from service.backends.pytorch.backend import PyTorchBackend

    return PyTorchBackend().open(config, folder / "1", spec)


def _read_only(rows: int, seed: int) -> np.ndarray:
    """An input as the wire gives it: a read-only view of bytes."""
    x = np.random.default_rng(seed).standard_normal((rows, WIDTH), dtype=np.float32)
    return np.frombuffer(x.tobytes(), np.float32).reshape(rows, WIDTH)


def test_tensorflow_calls_one_callable_per_signature_not_session_run(tmp_path: Path) -> None:
    need_framework("tensorflow", "tensorflow")
    instance = _open("tensorflow", tmp_path, threads=1, batching=True)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("Session.run called")

    instance._session.run = refuse
    try:
        for rows, seed in ((1, 0), (5, 1), (3, 2)):
            x = _read_only(rows, seed)
            out = instance.execute({"INPUT0": x}, ["OUTPUT0"])
            want = mlp_reference(x, width=WIDTH, layers=LAYERS)
            np.testing.assert_allclose(out["OUTPUT0"], want, rtol=1e-4, atol=1e-4)
        assert list(instance._callables) == [(("INPUT0",), ("OUTPUT0",))]
        assert instance._inline  # one inter-op thread: the instance's own thread runs the ops
        assert instance.execute({"INPUT0": _read_only(1, 0)}, []) == {}
    finally:
        instance.close()
    assert instance._callables == {}


def test_tensorflow_keeps_its_pool_with_more_inter_op_threads(tmp_path: Path) -> None:
    need_framework("tensorflow", "tensorflow")
    instance = _open("tensorflow", tmp_path, threads=1, batching=True, inter_op=2)
    try:
        assert not instance._inline
        x = _read_only(2, 3)
        out = instance.execute({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"]
        np.testing.assert_allclose(out, mlp_reference(x, WIDTH, LAYERS), rtol=1e-4, atol=1e-4)
    finally:
        instance.close()


class _Request:
    """An OpenVINO infer request that refuses ``infer(inputs)``: inputs must be set on it."""

    def __init__(self, request: Any) -> None:
        self.request = request

    def __getattr__(self, name: str) -> Any:
        return getattr(self.request, name)

    def infer(self, *args: Any, **kwargs: Any) -> Any:
        assert not args and not kwargs, "infer() handed the inputs"
        return self.request.infer()


def test_openvino_sets_inputs_on_the_request_padded_or_read_only(tmp_path: Path) -> None:
    need_framework("openvino", "openvino")
    instance = _open("openvino", tmp_path, threads=1, batching=True)  # batch padding on
    instance._request = _Request(instance._request)
    for x in (_read_only(3, 0), np.array(_read_only(16, 1)), _read_only(16, 2)):
        out = instance.execute({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"]
        assert out.shape == x.shape
        # the CPU plugin may run FP32 in bf16 (its default hint)
        want = mlp_reference(x, width=WIDTH, layers=LAYERS)
        np.testing.assert_allclose(out, want, rtol=0.05, atol=0.05)
    instance.close()


def test_pytorch_sets_the_jit_settings_only_when_they_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_framework("torch", "torch")
    import torch

    from service.backends.pytorch import backend as torch_backend

    instance = _open("pytorch", tmp_path, threads=1, batching=True)
    calls: list[bool] = []
    setter = torch._C._set_graph_executor_optimize
    monkeypatch.setattr(
        torch._C, "_set_graph_executor_optimize", lambda on: (calls.append(on), setter(on))
    )
    monkeypatch.setattr(torch_backend, "_APPLIED", [None])
    for seed in range(3):
        x = _read_only(2, seed)
        out = instance.execute({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"]
        np.testing.assert_allclose(out, mlp_reference(x, WIDTH, LAYERS), rtol=1e-4, atol=1e-4)
        assert out.flags.c_contiguous and not isinstance(out, torch.Tensor)
    assert calls == [True]  # once: the other calls found the settings applied
    instance.close()
