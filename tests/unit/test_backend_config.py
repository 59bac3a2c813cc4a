"""--backend-config: Triton's grammar, the merge of global and per-backend settings, the
python backend's keys (checks and texts as its TRITONBACKEND_Initialize) and their effect
on the shared-memory regions; Triton's trace file writer and its per-model log_frequency."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from inference import model_config_pb2 as mc
from service.backends import backend_config
from service.backends.backend_config import BackendConfig, from_flags, parse_backend_config
from service.backends.python.settings import Settings
from service.backends.python.shm import RegionPool
from service.telemetry.settings import TraceSettings
from service.telemetry.tracing import Tracing
from service.telemetry.triton_trace import TraceLog, tensor_data


@pytest.fixture
def installed() -> Iterator[None]:
    yield
    backend_config.configure(BackendConfig())


def test_grammar() -> None:
    assert parse_backend_config("python,shm-default-byte-size=1048576") == (
        "python",
        "shm-default-byte-size",
        "1048576",
    )
    assert parse_backend_config("default-max-batch-size=8") == ("", "default-max-batch-size", "8")
    assert parse_backend_config("tensorflow,version=2") == ("tensorflow", "version", "2")
    with pytest.raises(
        ValueError, match=re.escape('Bad option: "--backend-config".\nNo backend specified')
    ):
        from_flags([",a=1"], True)
    with pytest.raises(ValueError, match="option format is '<backend name>,<setting>=<value>'"):
        from_flags(["python,a="], True)


def test_global_then_specific() -> None:
    config = from_flags(
        ["default-max-batch-size=8", "onnxruntime,default-max-batch-size=2", "python,x=1"], True
    )
    assert config.default_max_batch_size("onnxruntime") == 2
    assert config.default_max_batch_size("python") == 8
    assert BackendConfig().default_max_batch_size("python") == 4
    assert config.for_backend("python") == {"default-max-batch-size": "8", "x": "1"}
    assert any("python,x has no effect" in n for n in config.notes())


def test_tensorflow_version() -> None:
    assert from_flags(["tensorflow,version=2"], True).refusal() is None
    assert "no longer supports Tensorflow 1" in str(
        from_flags(["tensorflow,version=1"], True).refusal()
    )
    assert "unexpected TensorFlow library version '3'" in str(
        from_flags(["tensorflow,version=3"], True).refusal()
    )


@pytest.mark.usefixtures("installed")
def test_python_keys_set_the_regions() -> None:
    backend_config.configure(
        from_flags(
            [
                "python,shm-default-byte-size=4194304",
                "python,shm-growth-byte-size=1048576",
                "python,stub-timeout-seconds=120",
            ],
            True,
        )
    )
    settings = Settings.from_config(mc.ModelConfig(name="m"))
    assert (settings.smallest_region, settings.region_growth) == (4 << 20, 1 << 20)
    assert settings.start_timeout == 120.0
    pool = RegionPool(64 << 20, settings.smallest_region, settings.region_growth)
    assert pool.capacity(10) == 4 << 20
    assert pool.capacity((4 << 20) + 1) == 5 << 20
    assert RegionPool().capacity(3 << 20) == 4 << 20  # default: powers of two from 1 MiB


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ("python,shm-default-byte-size=1024", "shm-default-byte-size can't be smaller than 4 MiBs"),
        (
            "python,shm-growth-byte-size=0",
            "shm-growth-byte-size can't be smaller than or equal to zero.",
        ),
        (
            "python,stub-timeout-seconds=-1",
            "stub-timeout-seconds can't be smaller than or equal to zero.",
        ),
        ("python,thread-pool-size=0", "thread-pool-size can't be less than 1."),
        ("python,shm_message_queue_size=many", "stol"),
    ],
)
def test_python_keys_checked(spec: str, text: str) -> None:
    backend_config.configure(from_flags([spec], True))
    with pytest.raises(ValueError, match=text):
        Settings.from_config(mc.ModelConfig(name="m"))


def test_trace_log_files(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    plain = TraceLog(str(path), 0)
    plain.write('{"id":1}', False)
    plain.write('{"id":2}', False)
    plain.close()
    assert json.loads(path.read_text()) == [{"id": 1}, {"id": 2}]
    indexed = TraceLog(str(tmp_path / "f.json"), 2)
    for i in range(3):
        indexed.write(f'{{"id":{i}}}', False)
    indexed.close()
    assert json.loads((tmp_path / "f.json.0").read_text()) == [{"id": 0}, {"id": 1}]
    assert json.loads((tmp_path / "f.json.1").read_text()) == [{"id": 2}]


def test_model_log_frequency_is_its_own(tmp_path: Path) -> None:
    """L0_trace: TraceSetting's log_frequency per model, cleared back to the global one
    (trace_endpoint_test.py's clear tests); the model's traces go by it to the file's
    indexes (test.sh: log_frequency 2 on ``simple``, 3 traces -> .0 with 2, .1 with 1)."""
    path = tmp_path / "t.json"
    tracing = Tracing(TraceSettings(level="TIMESTAMPS", rate=1, mode="triton", file=str(path)))
    model = tracing.update({"trace_rate": ["12"], "log_frequency": ["34"]}, "simple")
    assert (model["trace_rate"], model["log_frequency"]) == (["12"], ["34"])
    assert tracing.update({"trace_rate": [], "trace_count": []})["log_frequency"] == ["0"]
    cleared = tracing.update({"trace_rate": [], "trace_level": []}, "simple")
    assert (cleared["trace_rate"], cleared["log_frequency"]) == (["1"], ["34"])
    assert tracing.update({"log_frequency": []}, "simple")["log_frequency"] == ["0"]
    assert tracing.snapshot("simple") == tracing.snapshot()  # nothing of its own left
    tracing.update({"log_frequency": ["2"]}, "simple")
    assert tracing.trace_log is not None
    for i in range(3):
        tracing.trace_log.write(f'{{"id":{i}}}', False, "simple")
    tracing.trace_log.write('{"id":9}', False)  # the global setting: log_frequency 0
    tracing.shutdown()
    assert json.loads((tmp_path / "t.json.0").read_text()) == [{"id": 0}, {"id": 1}]
    assert json.loads((tmp_path / "t.json.1").read_text()) == [{"id": 2}]
    assert json.loads(path.read_text()) == [{"id": 9}]


def test_tensor_data_as_cpp_streams() -> None:
    assert tensor_data(np.array([1.0, 0.5, 1e-7], np.float32), "FP32") == "1,0.5,1e-07"
    assert tensor_data(np.array([True, False]), "BOOL") == "1,0"
    assert tensor_data(np.array([b"ab"], dtype=object), "BYTES") == '\\"ab\\"'
    assert tensor_data(np.array([65], np.uint8), "UINT8") == "A"
    assert tensor_data(np.zeros(2, np.float16), "FP16") == ""
