"""On a real GPU (marker ``gpu``; skipped with the reason elsewhere): GPU models served end to
end as a Triton user sees them, through tritonclient and the metrics endpoint.

- an ONNX model with ``KIND_GPU`` serves correct results over gRPC, its session on CUDA, its
  inputs staged in pinned memory and bound (the instance's load log line says so), with the
  instance in a thread of the server and, in the split layout, in a worker process of its own
  (``SERVICE_INSTANCE_WORKERS=1``, decision 030); its statistics count the device memory;
- a model asking for CUDA where CUDA cannot start fails to load with the documented text;
- a Python model computes with PyTorch on the GPU (``from_dlpack`` both ways, FP32 and BF16),
  its tensors in CUDA shared memory regions of the client (tritonclient's CUDA shared-memory
  utilities);
- the NVML metrics move: used memory grows with a loaded model, utilization is above 0 under load.

Each test records its figure with ``gpu_support.record`` for scripts/gpu_check.sh's summary.
"""

from __future__ import annotations

import importlib
import re
import threading
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from gpu_support import gpu_needs, record
from integration_support import infer_input, running_server
from models import make_config, mlp_model, mlp_reference, write_model
from operations_support import http_get, metrics_port
from proc_info import cmdline
from server_process import FRONTENDS
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.gpu

WIDTH, LAYERS = 256, 3
EXPLICIT = ("--model-control-mode", "explicit")
# onnxruntime's CUDA provider runs FP32 MatMul in TF32 on Ampere and later (its use_tf32
# default, which Triton's backend keeps): about 1e-3 apart from the FP32 reference here.
TF32 = {"rtol": 1e-2, "atol": 1e-2}
# The instance's load line, with the pid of the process that opened it (glog's third field).
_INSTANCE_LINE = re.compile(
    r"^I\S+ \S+ (\d+) \S+\] "
    r"model 'mlp' instance '([^']+)' \(GPU device (\d+)\): onnxruntime providers ([^;]+); (.*)",
    re.M,
)
#: Where the instances run: threads of the server, or worker processes (the split layout).
LAYOUTS = {"threads": {}, "workers": {"SERVICE_INSTANCE_WORKERS": "1"}}
WORKER_MODULE = "service.backends.isolated.host"


def _write_mlp(root: Path, width: int = WIDTH, parameters: str = "") -> None:
    config = make_config(
        "mlp",
        [("INPUT0", "FP32", [width])],
        [("OUTPUT0", "FP32", [width])],
        max_batch_size=64,
        instance_kind="KIND_GPU",
        extra="dynamic_batching { }\n" + parameters,
    )
    write_model(root, "mlp", mlp_model(width=width, layers=LAYERS), config)


def _infer_mlp(client: grpcclient.InferenceServerClient, x: np.ndarray) -> np.ndarray:
    tensor = infer_input("INPUT0", x, "FP32")
    result = client.infer("mlp", [tensor], outputs=[grpcclient.InferRequestedOutput("OUTPUT0")])
    out = result.as_numpy("OUTPUT0")
    assert out is not None
    return out


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_onnx_model_on_the_gpu_serves_through_grpc(tmp_path: Path, layout: str) -> None:
    if layout == "workers" and FRONTENDS == "0":
        pytest.skip("instance workers need the split layout (SERVICE_FRONTENDS > 0)")
    _write_mlp(tmp_path)
    with (
        running_server([tmp_path], env=LAYOUTS[layout]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        config = client.get_model_config("mlp", as_json=True)["config"]
        assert config["instance_group"][0]["kind"] == "KIND_GPU", config["instance_group"]
        match = _INSTANCE_LINE.search(server.log)
        assert match, f"no instance line for 'mlp' on a GPU in the log:\n{server.log}"
        pid, instance, device, providers, path = match.groups()
        assert providers.split(", ")[0] == "CUDAExecutionProvider", providers
        assert path == "IO binding, inputs staged in pinned host memory", path
        opener = cmdline(int(pid))
        assert (WORKER_MODULE in opener) == (layout == "workers"), (layout, opener)

        rng = np.random.default_rng(0)
        for rows in (1, 7, 64):
            x = rng.random((rows, WIDTH), dtype=np.float32)
            np.testing.assert_allclose(
                _infer_mlp(client, x), mlp_reference(x, WIDTH, LAYERS), **TF32
            )
        # Concurrent callers: the dynamic batcher merges them into batches on the device.
        inputs = [rng.random((2, WIDTH), dtype=np.float32) for _ in range(32)]
        outputs: list[np.ndarray | None] = [None] * len(inputs)

        def call(index: int) -> None:
            with grpcclient.InferenceServerClient(server.url) as own:
                outputs[index] = _infer_mlp(own, inputs[index])

        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(inputs))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for x, out in zip(inputs, outputs, strict=True):
            assert out is not None
            np.testing.assert_allclose(out, mlp_reference(x, WIDTH, LAYERS), **TF32)
        stats = client.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
        inferences, executions = int(stats["inference_count"]), int(stats["execution_count"])
        assert inferences == 1 + 7 + 64 + 2 * len(inputs), stats
        # The device memory the model took: NVML's per-process figure, of the server's own
        # process around the load or of the instances' worker processes.
        gpu_memory = {
            int(m.get("id", 0)): int(m.get("byte_size", 0))
            for m in stats.get("memory_usage", [])
            if m["type"] == "GPU"
        }
        assert gpu_memory.get(int(device), 0) > 0, stats.get("memory_usage")
    record(
        f"{layout}: {instance} on GPU {device} ({gpu_memory[int(device)] / 2**20:.0f} MiB): "
        f"{providers}; {path}; {inferences} inferences in {executions} executions"
    )


def test_model_asking_for_cuda_where_it_cannot_start(tmp_path: Path) -> None:
    """When the CUDA libraries cannot be loaded, onnxruntime-gpu would quietly run the session
    on the CPU; the load fails instead, with the text of docs/gpu.md, and
    ``allow_cpu_fallback`` runs it on the CPU on purpose. Unloadable libraries are made by
    putting files that are not libraries under CUDA's names first on the library path (found
    before any real copy, system-wide ones included), with the preload turned off."""
    _write_mlp(tmp_path)
    broken = tmp_path / "broken-cuda"
    broken.mkdir()
    for name in ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13"):
        (broken / name).write_text("not a shared library\n")
    env = {"ORT_PRELOAD_DLLS": "0", "LD_LIBRARY_PATH": str(broken)}
    with (
        running_server([tmp_path], [*EXPLICIT], env=env) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("mlp")
        text = refused.value.message()
        assert "onnxruntime did not enable CUDAExecutionProvider for instance" in text, text
        assert "set parameter allow_cpu_fallback to run on the CPU instead" in text, text
        assert not client.is_model_ready("mlp")
    fallback = tmp_path / "fallback"
    _write_mlp(
        fallback,
        parameters='parameters { key: "allow_cpu_fallback" value { string_value: "true" } }',
    )
    with (
        running_server([fallback], [*EXPLICIT, "--load-model", "mlp"], env=env) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        x = np.ones((3, WIDTH), np.float32)
        np.testing.assert_allclose(_infer_mlp(client, x), mlp_reference(x, WIDTH, LAYERS), **TF32)
        assert "running on the CPU (allow_cpu_fallback)" in server.log, server.log
    record(f"refused: {text.splitlines()[0][:160]}")


_TORCH_MODEL = """
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        assert args["model_instance_kind"] == "GPU", args["model_instance_kind"]
        self.device = torch.device("cuda", int(args["model_instance_device_id"]))

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            y = torch.from_dlpack(x).to(self.device) * 2 + 1
            assert y.is_cuda
            out = pb_utils.Tensor.from_dlpack("Y", y)
            assert not out.is_cpu()
            half = pb_utils.Tensor.from_dlpack("Y16", y.to(torch.bfloat16))
            responses.append(pb_utils.InferenceResponse([out, half]))
        return responses
"""
_TORCH_CONFIG = """
name: "torchy"
backend: "python"
max_batch_size: 8
input [{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }]
output [
  { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "Y16" data_type: TYPE_BF16 dims: [ -1 ] }
]
instance_group [{ kind: KIND_GPU }]
"""


def test_python_model_on_the_gpu_with_cuda_shared_memory(tmp_path: Path) -> None:
    try:
        cudashm = importlib.import_module("tritonclient.utils.cuda_shared_memory")
    except (ImportError, RuntimeError) as exc:  # RuntimeError: tritonclient without cuda-python
        gpu_needs(False, f"tritonclient's CUDA shared memory utilities: {exc}")
    model = tmp_path / "torchy"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(_TORCH_CONFIG)
    (model / "1" / "model.py").write_text(_TORCH_MODEL)
    x = np.arange(2 * 50_000, dtype=np.float32).reshape(2, -1)
    with (
        running_server([tmp_path]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        # Tensors in the request: from_dlpack on the host input, CUDA tensors returned (a
        # torch.bfloat16 one arrives as BF16: tritonclient's ml_dtypes.bfloat16).
        tensor = infer_input("X", x, "FP32")
        result = client.infer("torchy", [tensor])
        np.testing.assert_array_equal(result.as_numpy("Y"), x * 2 + 1)
        half = result.as_numpy("Y16")
        assert half is not None and half.dtype == ml_dtypes.bfloat16, half
        np.testing.assert_array_equal(
            half.astype(np.float32), (x * 2 + 1).astype(ml_dtypes.bfloat16).astype(np.float32)
        )

        # Tensors in the client's CUDA shared memory, on the model's device.
        handles = {
            name: cudashm.create_shared_memory_region(name, x.nbytes, 0) for name in ("in", "out")
        }
        try:
            cudashm.set_shared_memory_region(handles["in"], [x])
            for name, handle in handles.items():
                client.register_cuda_shared_memory(
                    name, cudashm.get_raw_handle(handle), 0, x.nbytes
                )
            status = client.get_cuda_shared_memory_status(as_json=True)
            assert {r["name"] for r in status.get("regions", {}).values()} == {"in", "out"}, status
            tensor = grpcclient.InferInput("X", list(x.shape), "FP32")
            tensor.set_shared_memory("in", x.nbytes)
            wanted = grpcclient.InferRequestedOutput("Y")
            wanted.set_shared_memory("out", x.nbytes)
            result = client.infer("torchy", [tensor], outputs=[wanted])
            output = result.get_output("Y")  # name and shape only: the bytes are in "out"
            assert output is not None and list(output.shape) == list(x.shape), output
            got = cudashm.get_contents_as_numpy(handles["out"], np.float32, list(x.shape))
            np.testing.assert_array_equal(got, x * 2 + 1)
        finally:
            client.unregister_cuda_shared_memory()
            for handle in handles.values():
                cudashm.destroy_shared_memory_region(handle)
    record(f"torch on the GPU (FP32, BF16), {x.nbytes} bytes in and out of CUDA shared memory")


def _gpu_samples(port: int) -> dict[str, float]:
    """The nv_gpu_* samples of GPU 0 (the first gpu_uuid in the exposition)."""
    status, _, body = http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200, body
    samples: dict[str, float] = {}
    first_uuid = None
    for line in body.decode().splitlines():
        match = re.match(r'^(nv_\w+)\{gpu_uuid="([^"]+)"\} (\S+)$', line)
        if match is None:
            continue
        family, uuid, value = match.groups()
        first_uuid = first_uuid or uuid
        if uuid == first_uuid:
            samples[family] = float(value)
    return samples


def test_nvml_metrics_move_with_a_loaded_model_and_under_load(tmp_path: Path) -> None:
    width = 2048
    _write_mlp(tmp_path, width=width)
    args = [*EXPLICIT, "--metrics-interval-ms", "200"]
    with (
        running_server([tmp_path], args) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        port = metrics_port(server)
        time.sleep(0.5)
        before = _gpu_samples(port)
        for family in ("nv_gpu_utilization", "nv_gpu_memory_used_bytes", "nv_gpu_power_usage"):
            assert family in before, f"{family} missing from /metrics: {sorted(before)}"
        assert before["nv_gpu_memory_total_bytes"] > 0
        client.load_model("mlp")
        time.sleep(0.5)
        loaded = _gpu_samples(port)
        grown = loaded["nv_gpu_memory_used_bytes"] - before["nv_gpu_memory_used_bytes"]
        assert grown > 0, (before, loaded)

        stop = threading.Event()

        def drive() -> None:
            x = np.ones((64, width), np.float32)
            with grpcclient.InferenceServerClient(server.url) as own:
                while not stop.is_set():
                    _infer_mlp(own, x)

        drivers = [threading.Thread(target=drive) for _ in range(4)]
        for driver in drivers:
            driver.start()
        try:
            peak = 0.0
            deadline = time.monotonic() + 15
            while peak == 0.0 and time.monotonic() < deadline:
                time.sleep(0.5)
                peak = max(peak, _gpu_samples(port)["nv_gpu_utilization"])
        finally:
            stop.set()
            for driver in drivers:
                driver.join()
        assert peak > 0, "nv_gpu_utilization stayed 0 under load"
        energy = _gpu_samples(port)["nv_energy_consumption"]
        assert energy > before.get("nv_energy_consumption", 0.0)
    record(f"memory +{grown / 2**20:.0f} MiB with mlp 3x{width} loaded; utilization {peak:.2f}")
