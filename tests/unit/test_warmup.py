"""Warmup samples and runs (``core/warmup.py``), on in-memory model versions.

The end-to-end behaviour, checked against the reference Triton, is in
tests/integration/test_warmup.py; here the data each sample kind makes, and how a run
reports failures and counts statistics.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from test_validation import make_version

from inference import model_config_pb2 as mc
from service.backends.base import BackendRequest, InstanceSpec, ResponseSender
from service.core.warmup import WarmupFailed, warm_up, warmup_samples
from service.repository.completion import ModelSignature
from service.repository.limits import ConfigLimits, load_refusal


def config(io: str, samples: str, max_batch_size: int = 8, extra: str = "") -> str:
    return f"""
name: "m"
max_batch_size: {max_batch_size}
{io}
{extra}
model_warmup [ {samples} ]
"""


STRINGS = """
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 2 ] } ]
"""
FLOATS = """
input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


def sample(
    name: str, key: str, datatype: str, data: str, batch: int = 1, dims: str = "3", count: int = 0
) -> str:
    return (
        f'{{ name: "{name}" batch_size: {batch} count: {count} inputs {{ key: "{key}" value: '
        f"{{ data_type: {datatype} dims: [ {dims} ] {data} }} }} }}"
    )


ZEROS = "zero_data: true"


def test_string_random_data_is_empty_strings_and_a_file_is_parsed(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "s").write_bytes(b"\x03\x00\x00\x00233\x01\x00\x00\x00x")
    text = config(
        STRINGS,
        sample("r", "TEXT", "TYPE_STRING", "random_data: true", dims="2")
        + ", "
        + sample("f", "TEXT", "TYPE_STRING", 'input_data_file: "s"', dims="2"),
    )
    random, from_file = warmup_samples(make_version(text), tmp_path)
    assert random.requests[0].inputs["TEXT"].tolist() == [[b"", b""]]
    assert from_file.requests[0].inputs["TEXT"].tolist() == [[b"233", b"x"]]


def test_a_file_gives_its_first_bytes_to_every_row(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    data = np.array([1, 2, 3, 4, 5], np.float32)
    (tmp_path / "warmup" / "raw").write_bytes(data.tobytes())
    text = config(FLOATS, sample("f", "X", "TYPE_FP32", 'input_data_file: "raw"', batch=2))
    (only,) = warmup_samples(make_version(text), tmp_path)
    assert len(only.requests) == 2
    for job in only.requests:
        assert job.batch_size == 1
        assert job.inputs["X"].tolist() == [[1, 2, 3]]
        assert job.outputs == ["Y"]


def test_an_unbatched_model_gets_no_batch_dimension(tmp_path: Path) -> None:
    text = config(FLOATS, sample("z", "X", "TYPE_FP32", ZEROS), max_batch_size=0)
    (only,) = warmup_samples(make_version(text), tmp_path)
    assert only.requests[0].inputs["X"].shape == (3,)
    assert only.count == 1  # an unset count runs once


def test_a_missing_file_is_internal(tmp_path: Path) -> None:
    text = config(FLOATS, sample("f", "X", "TYPE_FP32", 'input_data_file: "gone"'))
    with pytest.raises(WarmupFailed) as caught:
        warmup_samples(make_version(text), tmp_path)
    assert str(caught.value) == (
        f"Internal: failed to open text file for read {tmp_path}/warmup/gone: "
        "No such file or directory"
    )


def test_bounds_refuse_a_warmup_before_anything_is_built() -> None:
    big = config(FLOATS, sample("b", "X", "TYPE_FP32", ZEROS, batch=4, dims="1000000000"))
    refusal = load_refusal(text_format.Parse(big, mc.ModelConfig()), ConfigLimits())
    assert refusal == (
        "model_warmup 'b' of model 'm' needs 16000000000 bytes of data, more than the limit "
        "of 1073741824"
    )
    many = config(FLOATS, sample("c", "X", "TYPE_FP32", ZEROS, count=70000))
    assert "asks for count 70000" in str(
        load_refusal(text_format.Parse(many, mc.ModelConfig()), ConfigLimits())
    )


class Doubler:
    """A tensor instance: Y = 2 X, or the error it is told to raise."""

    def __init__(self, name: str, error: Exception | None = None) -> None:
        self.spec = InstanceSpec(name, "KIND_CPU", 0, 1)
        self.error = error
        self.batches: list[int] = []

    def signature(self) -> ModelSignature:
        raise NotImplementedError

    def execute(
        self, inputs: Mapping[str, np.ndarray], outputs: Sequence[str]
    ) -> dict[str, np.ndarray]:
        if self.error is not None:
            raise self.error
        self.batches.append(len(inputs["X"]))
        return {"Y": inputs["X"] * 2}

    def close(self) -> None:
        pass


def test_runs_are_counted_as_the_models_inferences(tmp_path: Path) -> None:
    text = config(
        FLOATS,
        sample("z", "X", "TYPE_FP32", ZEROS, batch=3, count=2),
    )
    model = make_version(text)
    instances = [Doubler("m_0_0"), Doubler("m_0_1")]
    warm_up(model, instances, warmup_samples(model, tmp_path))
    assert [i.batches for i in instances] == [[3, 3], [3, 3]]
    assert (model.stats.inference_count, model.stats.execution_count) == (12, 4)
    assert model.stats.success.count == 12


def test_an_execution_error_is_each_requests_error(tmp_path: Path) -> None:
    model = make_version(config(FLOATS, sample("z", "X", "TYPE_FP32", ZEROS, batch=2)))
    with pytest.raises(WarmupFailed) as caught:
        warm_up(model, [Doubler("m_0_0", RuntimeError("boom"))], warmup_samples(model, tmp_path))
    assert str(caught.value) == ("Invalid argument: failed to run warmup sample 'z': boom; boom; ")
    assert model.stats.execution_count == 0


class LateFinal:
    """A decoupled request instance that sends each final flag from another thread."""

    def __init__(self) -> None:
        self.spec = InstanceSpec("m_0_0", "KIND_CPU", 0, 1)

    def signature(self) -> None:
        return None

    def execute_requests(
        self, requests: Sequence[BackendRequest], senders: Sequence[ResponseSender]
    ) -> None:
        def finish() -> None:
            for sender in senders:
                sender.send(error="late error" if len(requests) > 1 else None, final=True)

        threading.Timer(0.05, finish).start()

    def close(self) -> None:
        pass


def test_a_decoupled_sample_waits_for_each_final_flag(tmp_path: Path) -> None:
    decoupled = "model_transaction_policy { decoupled: true }"
    ok = make_version(config(FLOATS, sample("d", "X", "TYPE_FP32", ZEROS), extra=decoupled))
    warm_up(ok, [LateFinal()], warmup_samples(ok, tmp_path))
    assert ok.stats.execution_count == 1
    bad = make_version(
        config(FLOATS, sample("d", "X", "TYPE_FP32", ZEROS, batch=2), extra=decoupled)
    )
    with pytest.raises(
        WarmupFailed, match="failed to run warmup sample 'd': late error; late error; "
    ):
        warm_up(bad, [LateFinal()], warmup_samples(bad, tmp_path))
