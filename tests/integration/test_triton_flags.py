"""Every flag of ``tritonserver --help`` (2.51) on a real server, --backend-config's
effects, and Triton's own trace mode (``--trace-config triton,file=...``): the file's
content and its naming with log-frequency."""

from __future__ import annotations

import json
from pathlib import Path

import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import add_sub_inputs, running_server
from operations_support import write_add_sub
from server_process import ServerProcess

A = np.ones((1, 16), dtype=np.float32)

#: Every flag of tritonserver --help at 2.51 but --help and those the test harness sets
#: (--model-repository, --grpc-address, --grpc-port, --metrics-address, --metrics-port).
EVERY_FLAG = [
    "--id=triton",
    "--exit-timeout-secs=5",
    "--log-verbose=0",
    "--log-info=true",
    "--log-warning=true",
    "--log-error=true",
    "--log-format=default",
    "--model-store={repo}",
    "--exit-on-error=true",
    "--disable-auto-complete-config",
    "--strict-readiness=true",
    "--model-control-mode=NONE",
    "--repository-poll-secs=15",
    "--model-config-name=h100",
    "--model-load-thread-count=4",
    "--model-load-retry-count=0",
    "--model-namespacing=false",
    "--enable-peer-access=true",
    "--allow-http=true",
    "--http-address=127.0.0.1",
    "--http-port=18000",
    "--reuse-http-port=false",
    "--http-header-forward-pattern=x-.*",
    "--http-thread-count=8",
    "--http-restricted-api=model-repository:admin-key=admin-value",
    "--allow-grpc=true",
    "--reuse-grpc-port=false",
    "--grpc-header-forward-pattern=x-.*",
    "--grpc-infer-allocation-pool-size=8",
    "--grpc-use-ssl=false",
    "--grpc-use-ssl-mutual=false",
    "--grpc-server-cert=unused.pem",
    "--grpc-server-key=unused.key",
    "--grpc-root-cert=unused-ca.pem",
    "--grpc-infer-response-compression-level=none",
    "--grpc-keepalive-time=7200000",
    "--grpc-keepalive-timeout=20000",
    "--grpc-keepalive-permit-without-calls=false",
    "--grpc-http2-max-pings-without-data=2",
    "--grpc-http2-min-recv-ping-interval-without-data=300000",
    "--grpc-http2-max-ping-strikes=2",
    "--grpc-max-connection-age=3600000",
    "--grpc-max-connection-age-grace=60000",
    "--grpc-restricted-protocol=shared-memory:admin-key=admin-value",
    "--allow-sagemaker=false",
    "--sagemaker-port=18080",
    "--sagemaker-safe-port-range=18000-18100",
    "--sagemaker-thread-count=8",
    "--allow-vertex-ai=false",
    "--vertex-ai-port=18081",
    "--vertex-ai-thread-count=8",
    "--vertex-ai-default-model=add_sub",
    "--allow-metrics=true",
    "--allow-gpu-metrics=false",
    "--allow-cpu-metrics=true",
    "--metrics-interval-ms=2000",
    "--metrics-config=summary_latencies=false",
    "--trace-config=level=OFF",
    "--backend-directory=/opt/tritonserver/backends",
    "--backend-config=python,shm-default-byte-size=1048576",
    "--backend-config=python,stub-timeout-seconds=120",
    "--backend-config=tensorflow,version=2",
    "--backend-config=default-max-batch-size=4",
    "--repoagent-directory=/opt/tritonserver/repoagents",
    "--cache-config=local,size=1048576",
    "--cache-directory=/opt/tritonserver/caches",
    "--rate-limit=off",
    "--rate-limit-resource=R1:10:0",
    "--pinned-memory-pool-byte-size=268435456",
    "--cuda-memory-pool-byte-size=0:67108864",
    "--cuda-virtual-address-size=0:1073741824",
    "--min-supported-compute-capability=6.0",
    "--buffer-manager-thread-count=0",
    "--host-policy=gpu0,numa-node=0",
    "--model-load-gpu-limit=0:0.9",
    "--strict-model-config=false",
    "--trace-file={trace}",
    "--trace-level=OFF",
    "--trace-rate=1000",
    "--trace-count=-1",
    "--trace-log-frequency=0",
]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("triton_flags")
    write_add_sub(path, "add_sub")
    return path


def _infer(server: ServerProcess, times: int = 1, model: str = "add_sub") -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        for _ in range(times):
            result = client.infer(model, add_sub_inputs(A, A))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + A)


def test_every_tritonserver_flag(repo: Path, tmp_path: Path) -> None:
    """A deployment's whole Triton command line starts the server, which serves."""
    args = [f.format(repo=repo, trace=tmp_path / "t.json") for f in EVERY_FLAG]
    with running_server([repo], args) as server:
        _infer(server)
        log = server.log
    assert "--http-port has no effect here" in log
    assert "--backend-config for backend 'tensorflow' (version) has no effect here" in log
    assert "--pinned-memory-pool-byte-size has no effect here" in log
    assert "--rate-limit-resource has no effect here" not in log  # the rate limiter is real
    assert "'--strict-model-config' has been deprecated" in log


def test_bad_values_are_refused_with_tritons_text(repo: Path) -> None:
    for flag, text in [
        ("--backend-config=,key=1", "No backend specified. --backend-config option format"),
        ("--backend-config=python,key", "--backend-config option format is"),
        ("--http-port=port", 'Bad option: "--http-port".\nInvalid option value. Got port'),
        ("--rate-limit=sometimes", "invalid argument for --rate-limit"),
        ("--trace-config=mode=zipkin", "invalid value for trace mode option: zipkin"),
        ("--allow-sagemaker=maybe", "invalid value for bool option: maybe"),
    ]:
        server = ServerProcess([repo], [flag])
        with pytest.raises(RuntimeError):
            server.start(timeout=30)
        assert text in server.log, flag


def test_tensorflow_1_is_refused_at_start(repo: Path) -> None:
    server = ServerProcess([repo], ["--backend-config=tensorflow,version=1"])
    with pytest.raises(RuntimeError):
        server.start(timeout=30)
    assert "error: creating server: Invalid argument - starting from 23.04" in server.log


def test_default_max_batch_size(tmp_path: Path) -> None:
    """Auto-complete gives a batching model Triton's default-max-batch-size."""
    models.write_model(tmp_path, "auto", models.add_sub_model(), None)
    args = ["--backend-config=default-max-batch-size=7"]
    with (
        running_server([tmp_path], args) as server,
        grpcclient.InferenceServerClient(server.url) as c,
    ):
        config = c.get_model_config("auto", as_json=True)["config"]
    assert int(config["max_batch_size"]) == 7


def test_disable_auto_complete_config(tmp_path: Path) -> None:
    models.write_model(tmp_path, "auto", models.add_sub_model(), None)
    server = ServerProcess([tmp_path], ["--disable-auto-complete-config"])
    with pytest.raises(RuntimeError):
        server.start(timeout=30)
    assert "failed to load all models" in server.log


def test_python_backend_config_is_checked(tmp_path: Path) -> None:
    """python's keys are checked with Triton's python backend texts: the load fails."""
    source = Path(__file__).resolve().parents[1] / "python_models" / "add_sub"
    target = tmp_path / "add_sub_py"
    target.mkdir()
    (target / "1").mkdir()
    (target / "1" / "model.py").write_text((source / "1" / "model.py").read_text())
    (target / "config.pbtxt").write_text(
        (source / "config.pbtxt").read_text().replace('"add_sub"', '"add_sub_py"')
    )
    args = ["--backend-config=python,shm-growth-byte-size=0", "--exit-on-error=false"]
    with running_server([tmp_path], args) as server:
        with grpcclient.InferenceServerClient(server.url) as client:
            assert not client.is_model_ready("add_sub_py")
        assert "shm-growth-byte-size can't be smaller than or equal to zero." in server.log


# --- Triton's trace mode -------------------------------------------------------------------


def _entries(path: Path) -> list[dict[str, object]]:
    data = json.loads(path.read_text())
    assert isinstance(data, list)
    return data


def _by_trace(entries: list[dict[str, object]]) -> dict[int, list[dict[str, object]]]:
    traces: dict[int, list[dict[str, object]]] = {}
    for entry in entries:
        traces.setdefault(int(entry["id"]), []).append(entry)  # type: ignore[call-overload]
    return traces


def test_triton_trace_file(repo: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    args = [f"--trace-config=triton,file={trace}", "--trace-config=level=TIMESTAMPS"]
    args += ["--trace-config=rate=1", "--trace-config=mode=triton"]
    with running_server([repo], args) as server:
        _infer(server, 3)
        with grpcclient.InferenceServerClient(server.url) as client:
            settings = client.get_trace_settings(as_json=True)["settings"]
    assert settings["trace_mode"]["value"] == ["triton"]
    assert settings["trace_file"]["value"] == [str(trace)]
    traces = _by_trace(_entries(trace))
    assert sorted(traces) == [1, 2, 3]
    for entries in traces.values():
        head = [e for e in entries if "model_name" in e]
        assert head == [{"id": head[0]["id"], "model_name": "add_sub", "model_version": 1}]
        stamps = {t["name"]: t["ns"] for e in entries for t in e.get("timestamps", [])}  # type: ignore[attr-defined]
        for name in ("REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END"):
            assert name in stamps
        assert stamps["REQUEST_START"] <= stamps["COMPUTE_START"] <= stamps["COMPUTE_END"]
        assert stamps["COMPUTE_END"] <= stamps["REQUEST_END"]


def test_triton_trace_log_frequency_and_tensors(repo: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    args = [f"--trace-file={trace}", "--trace-config=triton,log-frequency=2"]
    args += ["--trace-config=level=TIMESTAMPS", "--trace-config=level=TENSORS"]
    args += ["--trace-config=rate=1"]
    with running_server([repo], args) as server:
        _infer(server, 3)
    assert not trace.exists()
    first, second = _entries(Path(f"{trace}.0")), _entries(Path(f"{trace}.1"))
    assert sorted(_by_trace(first)) == [1, 2]
    assert sorted(_by_trace(second)) == [3]
    tensors = [e for e in first if "activity" in e]
    queue = [e["tensor"] for e in tensors if e["activity"] == "TENSOR_QUEUE_INPUT"]
    assert {
        "name": "INPUT0",
        "data": ",".join(["1"] * 16),
        "shape": "1,16",
        "dtype": "FP32",
    } in queue
    outputs = [e["tensor"]["name"] for e in tensors if e["activity"] == "TENSOR_BACKEND_OUTPUT"]  # type: ignore[index]
    assert sorted(outputs) == ["OUTPUT0", "OUTPUT0", "OUTPUT1", "OUTPUT1"]


def test_triton_trace_count(repo: Path, tmp_path: Path) -> None:
    """count=2 at rate 1: both traces go to <file>.0 once taken; nothing after."""
    trace = tmp_path / "trace.json"
    args = [f"--trace-config=triton,file={trace}", "--trace-config=level=TIMESTAMPS"]
    args += ["--trace-config=rate=1", "--trace-config=count=2"]
    with running_server([repo], args) as server:
        _infer(server, 3)
        assert sorted(_by_trace(_entries(Path(f"{trace}.0")))) == [1, 2]
    assert not trace.exists()
