"""The built-in identity, repeat and square backends, opened through the registry."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from python_models.harness import Collector, open_instances, request, run

from inference import model_config_pb2 as mc
from service.backends.base import RequestInstance
from service.backends.registry import get_backend
from service.repository.completion import check_against_signature, complete

IDENTITY = """
name: "identity_fp32" backend: "identity" max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [-1] },
       { name: "INPUT1" data_type: TYPE_STRING dims: [1] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [-1] },
        { name: "OUTPUT1" data_type: TYPE_STRING dims: [1] }]
"""
REPEAT = """
name: "repeat_int32" backend: "repeat" max_batch_size: 0
model_transaction_policy { decoupled: true }
input [{ name: "IN" data_type: TYPE_INT32 dims: [-1] },
       { name: "DELAY" data_type: TYPE_UINT32 dims: [-1] },
       { name: "WAIT" data_type: TYPE_UINT32 dims: [1] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] },
        { name: "IDX" data_type: TYPE_UINT32 dims: [1] }]
"""
SQUARE = """
name: "square_int32" backend: "square" max_batch_size: 0
model_transaction_policy { decoupled: true }
input [{ name: "IN" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]
"""


def config(text: str, **parameters: str) -> mc.ModelConfig:
    parsed = text_format.Parse(text, mc.ModelConfig())
    for key, value in parameters.items():
        parsed.parameters[key].string_value = value
    return parsed


def open_all(text: str, tmp_path: Path, count: int = 1, **parameters: str) -> list[Any]:
    parsed = config(text, **parameters)
    parsed.instance_group.add(count=count)
    return open_instances(parsed, tmp_path)


def test_identity_returns_every_input_as_its_output(tmp_path: Path) -> None:
    (instance,) = open_all(IDENTITY, tmp_path)
    assert isinstance(instance, RequestInstance)
    parsed = config(IDENTITY)
    complete(parsed, instance.signature())
    check_against_signature(parsed, instance.signature())
    words = np.array([[b"a"], [b"bc"]], dtype=np.object_)
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    both, only_first = run(
        instance,
        request(INPUT0=values, INPUT1=words),
        request(["OUTPUT0"], INPUT0=values[:1], INPUT1=words[:1]),
    )
    assert np.array_equal(both.only.outputs["OUTPUT0"], values)
    assert both.only.outputs["OUTPUT1"].tolist() == [[b"a"], [b"bc"]]
    assert list(only_first.only.outputs) == ["OUTPUT0"]
    (missing,) = run(instance, request(INPUT0=values))
    assert "no corresponding input 'INPUT1'" in (missing.only.error or "")


def test_identity_delays_per_instance_and_at_creation(tmp_path: Path) -> None:
    start = time.monotonic()
    instances = open_all(
        IDENTITY,
        tmp_path,
        count=2,
        execute_delay_ms="100",
        instance_wise_delay_multiplier="1",
        creation_delay_sec="0.3",
    )
    assert 0.3 <= time.monotonic() - start < 0.55  # once per load, not per instance
    assert [round(i.delay, 3) for i in instances] == [0.1, 0.2]
    durations = []
    for instance in instances:
        begin = time.monotonic()
        run(instance, request(INPUT0=np.ones((1, 1), np.float32), INPUT1=[[b"x"]]))
        durations.append(time.monotonic() - begin)
    assert 0.1 <= durations[0] < 0.19 and 0.2 <= durations[1] < 0.29


def test_identity_refuses_configs_it_cannot_serve(tmp_path: Path) -> None:
    bad = config(IDENTITY)
    bad.output[1].name = "RESULT1"
    with pytest.raises(ValueError, match="OUTPUT<index> pattern, got 'RESULT1'"):
        open_instances(bad, tmp_path)
    bad = config(IDENTITY)
    bad.output[0].data_type = mc.TYPE_INT32
    with pytest.raises(ValueError, match="datatype to match"):
        open_instances(bad, tmp_path)


def _repeat(values: list[int], delays: list[int], wait: int) -> Any:
    return request(
        IN=np.array(values, np.int32),
        DELAY=np.array(delays, np.uint32),
        WAIT=np.array([wait], np.uint32),
    )


def test_repeat_streams_one_response_per_element_then_a_final_flag(tmp_path: Path) -> None:
    (instance,) = open_all(REPEAT, tmp_path)
    try:
        start = time.monotonic()
        sender, empty = run(instance, _repeat([4, 5, 6], [50, 50, 50], 20), _repeat([], [], 0))
        assert time.monotonic() - start < 0.12  # returned after WAIT, not after the delays
        sender.wait()
        assert [(int(o["OUT"][0]), int(o["IDX"][0])) for o in sender.outputs] == [
            (4, 0),
            (5, 1),
            (6, 2),
        ]
        assert sender.outputs[0]["OUT"].dtype == np.int32
        assert sender.outputs[0]["IDX"].dtype == np.uint32
        assert [r.final for r in sender.responses] == [False, False, False, True]
        assert sender.responses[-1].outputs is None
        assert [r.final for r in empty.wait().responses] == [True]
        (mismatch,) = run(instance, _repeat([1, 2], [1], 0))
        assert "expected IN and DELAY shape to match" in (mismatch.only.error or "")
    finally:
        instance.close()


def test_repeat_stops_a_cancelled_request(tmp_path: Path) -> None:
    (instance,) = open_all(REPEAT, tmp_path)
    try:
        (sender,) = run(instance, _repeat(list(range(100)), [10] * 100, 0))
        while len(sender.responses) < 2:
            time.sleep(0.005)
        sender.cancel()
        sender.wait()
        assert len(sender.responses) < 20
        assert sender.responses[-1].final and sender.responses[-1].error == "request cancelled"
    finally:
        instance.close()


def test_repeat_needs_a_decoupled_config_of_its_shape(tmp_path: Path) -> None:
    plain = config(REPEAT)
    plain.model_transaction_policy.decoupled = False
    with pytest.raises(ValueError, match="decoupled: true"):
        open_instances(plain, tmp_path)
    batched = config(REPEAT)
    batched.max_batch_size = 4
    with pytest.raises(ValueError, match="max_batch_size == 0"):
        open_instances(batched, tmp_path)


def test_square_sends_n_responses_of_n(tmp_path: Path) -> None:
    (instance,) = open_all(SQUARE, tmp_path)
    try:
        three, none = run(
            instance, request(IN=np.array([3], np.int32)), request(IN=np.array([0], np.int32))
        )
        assert [o["OUT"].tolist() for o in three.wait().outputs] == [[3], [3], [3]]
        assert [r.final for r in three.responses] == [False, False, False, True]
        assert [(r.outputs, r.final) for r in none.wait().responses] == [(None, True)]
    finally:
        instance.close()


def test_square_stops_a_cancelled_request_and_close_joins_its_threads(tmp_path: Path) -> None:
    (instance,) = open_all(SQUARE, tmp_path)
    gate = threading.Event()

    class Slow(Collector):
        def send(self, *args: Any, **kwargs: Any) -> None:
            super().send(*args, **kwargs)
            if len(self.responses) == 5:
                gate.set()
                self.cancel()

    sender = Slow()
    instance.execute_requests([request(IN=np.array([1_000_000], np.int32))], [sender])
    assert gate.wait(5)
    sender.wait()
    assert sender.responses[-1].error == "request cancelled"
    assert 5 <= len(sender.responses) < 1000
    instance.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("square-")]


def test_registry_knows_the_builtin_backends() -> None:
    for name in ("identity", "repeat", "square", "python"):
        assert get_backend(name).name == name
