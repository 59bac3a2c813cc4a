"""The v1 translation pieces on their own: request completion and v1 checks, response
encoding, classification, the status builder, labels at load time, the error table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format, unknown_fields

from inference import model_config_pb2 as mc
from service.core.classification import top_classes
from service.core.index import IndexEntry
from service.core.inference_server import VersionStats
from service.core.labels import read_labels
from service.errors import ErrorCode, InvalidArgument, NotFound, ServerError
from service.grpc_frontend.v1_codec import (
    V1_CODES,
    decode_v1_infer,
    encode_v1_infer,
    request_status,
    v1_config,
    v1_version,
)
from service.grpc_frontend.v1_server_status import ApiStats, StatusFacts, server_status
from service.statistics import BatchTimings, ModelStats
from service.types import InferResponse, OutputTensor
from trtis import api_pb2 as api
from trtis import grpc_service_pb2 as gs
from trtis import request_status_pb2 as rs
from trtis import server_status_pb2 as ss

H = api.InferRequestHeader

CONFIG = text_format.Parse(
    """
    name: "m" platform: "onnxruntime_onnx" backend: "onnxruntime" max_batch_size: 4
    input { name: "A" data_type: TYPE_FP32 dims: [ -1, 2 ] }
    input { name: "F" data_type: TYPE_INT32 dims: [ 3 ] }
    input { name: "S" data_type: TYPE_STRING dims: [ 1 ] }
    output { name: "P" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "labels.txt" }
    output { name: "T" data_type: TYPE_STRING dims: [ 1 ] }
    """,
    mc.ModelConfig(),
)


def _request(batch: int = 2, **changes: object) -> gs.InferRequest:
    header = H(
        id=42,
        batch_size=batch,
        input=[H.Input(name="A", dims=[1, 2]), H.Input(name="F"), H.Input(name="S")],
        output=[H.Output(name="P", cls=H.Output.Class(count=2)), H.Output(name="T")],
    )
    raw = [b"\0" * 8 * batch, b"\0" * 12 * batch, b"\1\0\0\0x" * batch]
    request = gs.InferRequest(model_name="m", model_version=-1, meta_data=header, raw_input=raw)
    for key, value in changes.items():
        setattr(request, key, value)
    return request


def test_decode_completes_shapes_and_keeps_raw_bytes() -> None:
    core = decode_v1_infer(_request(), CONFIG)
    assert core.model_name == "m" and core.model_version == ""
    assert [(t.name, t.datatype, t.shape) for t in core.inputs] == [
        ("A", "FP32", (2, 1, 2)),
        ("F", "INT32", (2, 3)),  # dims left out: the config's fixed dims
        ("S", "BYTES", (2, 1)),
    ]
    assert core.inputs[1].raw == b"\0" * 24
    assert [o.name for o in core.outputs] == ["P", "T"]
    assert core.parameters == {}


def test_decode_sequence_flags_become_core_parameters() -> None:
    request = _request()
    request.meta_data.correlation_id = 99
    request.meta_data.flags = H.FLAG_SEQUENCE_START | H.FLAG_SEQUENCE_END
    assert decode_v1_infer(request, CONFIG).parameters == {
        "sequence_id": 99,
        "sequence_start": True,
        "sequence_end": True,
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: setattr(r.meta_data, "batch_size", 0), "batch-size must be >= 1 for 'm'"),
        (lambda r: setattr(r.meta_data, "batch_size", 5), "batch-size must be <= 4 for 'm'"),
        (
            lambda r: r.meta_data.output.add(name="NOPE"),
            "unexpected inference output 'NOPE' for model 'm'",
        ),
        (
            lambda r: setattr(r.meta_data.input[0], "name", "X"),
            "unexpected inference input 'X' for model 'm'",
        ),
        (
            lambda r: r.meta_data.input[0].ClearField("dims"),
            "model supports variable-size for input 'A', request must specify input shape "
            "for model 'm'",
        ),
        (
            lambda r: r.meta_data.input[0].dims.extend([7]),
            "unexpected shape for input 'A' for model 'm'. Expected [-1,2], got [1,2,7]",
        ),
        (
            lambda r: r.meta_data.input[0].dims.__setitem__(0, -3),
            "unexpected shape for input 'A' for model 'm'. Expected [-1,2], got [-3,2]",
        ),
        (
            lambda r: setattr(r.meta_data.input[1], "batch_byte_size", 5),
            "specific batch-byte-size for input 'F' does not match expected byte-size",
        ),
        (
            lambda r: r.raw_input.pop(),
            "expected tensor data for at least 2 inputs but got only 2 sets of data for model 'm'",
        ),
        (
            lambda r: r.raw_input.__setitem__(1, b"\0" * 7),
            "unexpected size 7 for input 'F', expecting 24 for model 'm'",
        ),
        (
            lambda r: r.meta_data.input[2].shared_memory.SetInParent(),
            "Unable to find shared memory region: ''",
        ),
    ],
)
def test_decode_refuses_with_v1_texts(change: object, message: str) -> None:
    request = _request()
    change(request)  # type: ignore[operator]
    with pytest.raises(InvalidArgument) as caught:
        decode_v1_infer(request, CONFIG)
    assert message in caught.value.message


def test_string_input_size_is_checked_only_when_given() -> None:
    request = _request()
    request.meta_data.input[2].batch_byte_size = 10
    assert decode_v1_infer(request, CONFIG).inputs[2].raw == b"\1\0\0\0x" * 2
    request.meta_data.input[2].batch_byte_size = 11
    with pytest.raises(InvalidArgument, match="unexpected size 10 for input 'S', expecting 11"):
        decode_v1_infer(request, CONFIG)


def _response() -> InferResponse:
    scores = np.array([[0.1, 0.7, 0.2], [0.5, 0.5, 0.9]], dtype=np.float32)
    texts = np.array([[b"ab"], [b"c"]], dtype=np.object_)
    return InferResponse(
        "m", "3", "", [OutputTensor("P", "FP32", scores), OutputTensor("T", "BYTES", texts)]
    )


def test_encode_classes_and_raw_outputs_in_request_order() -> None:
    header, raw = encode_v1_infer(_request(), _response(), CONFIG, {"P": ("a", "b")}, 1 << 20)
    assert (header.id, header.model_name, header.model_version, header.batch_size) == (
        42,
        "m",
        3,
        2,
    )
    classes = [
        [(c.idx, round(c.value, 3), c.label) for c in row.cls]
        for row in header.output[0].batch_classes
    ]
    # Highest first; equal values keep index order; a class past the labels has none.
    assert classes == [[(1, 0.7, "b"), (2, 0.2, "")], [(2, 0.9, ""), (0, 0.5, "a")]]
    assert raw[0] == b""
    assert header.output[1].name == "T"
    assert list(header.output[1].raw.dims) == [1]
    assert raw[1] == b"\2\0\0\0ab\1\0\0\0c"
    assert header.output[1].raw.batch_byte_size == len(raw[1])


def test_encode_refuses_classes_of_strings_and_oversized_responses() -> None:
    request = _request()
    request.meta_data.output[1].cls.count = 1
    with pytest.raises(
        InvalidArgument,
        match="class result not available for output 'T' due to unsupported type 'TYPE_STRING'",
    ):
        encode_v1_infer(request, _response(), CONFIG, {}, 1 << 20)
    with pytest.raises(InvalidArgument, match="exceeds gRPC's byte size limit 4"):
        encode_v1_infer(_request(), _response(), CONFIG, {}, 4)


def test_top_classes_unbatched_ints_and_clamped_count() -> None:
    array = np.array([[3, 9], [9, 1]], dtype=np.int64)
    (row,) = top_classes(array, 10, batched=False, labels=["x", "y", "z"])
    assert [(e.index, e.value, e.label) for e in row] == [
        (1, 9, "y"),
        (2, 9, "z"),
        (0, 3, "x"),
        (3, 1, ""),
    ]
    assert all(isinstance(e.value, int) for e in row)


def test_error_table_covers_every_code() -> None:
    assert set(V1_CODES) == set(ErrorCode)
    status = request_status("inference:0", 5, NotFound("gone"))
    assert (status.code, status.msg, status.server_id, status.request_id) == (
        rs.NOT_FOUND,
        "gone",
        "inference:0",
        5,
    )
    assert request_status("s", 1).code == rs.SUCCESS
    assert V1_CODES[ServerError("x").code] == rs.INTERNAL


def test_versions_and_config_conversion() -> None:
    assert (v1_version(-1), v1_version(0), v1_version(3)) == ("", "", "3")
    converted = v1_config(CONFIG)
    assert converted.name == "m" and converted.max_batch_size == 4
    assert converted.output[0].label_filename == "labels.txt"
    assert [i.data_type for i in converted.input] == [11, 8, 13]
    assert len(unknown_fields.UnknownFieldSet(converted)) == 0  # "backend" (v2 only) dropped


def test_status_from_index_configs_and_statistics() -> None:
    stats = ModelStats(wall_ms=lambda: 1234)
    timings = BatchTimings(0, 10, 30, 60)
    stats.record_execution(2, timings)
    stats.record_success(100, 7, timings, 2)
    stats.record_failure(50, "BACKEND", 2)
    stats.record_execution(1, timings)
    stats.record_success(40, 3, timings, 1)
    stats.record_failure(9)  # of no known batch size: Triton 1.x kept those under 0
    entries = [
        IndexEntry("m", "1", "READY", ""),
        IndexEntry("m", "2", "UNAVAILABLE", "boom"),
        IndexEntry("gone", "", "UNAVAILABLE", "unloaded"),
    ]
    api_stats = ApiStats()
    api_stats.status.add(5)
    out = server_status(
        StatusFacts("inference:0", "9.9", ss.SERVER_READY, 77),
        entries,
        {"m": CONFIG},
        [VersionStats("m", 1, stats)],
        api_stats,
    )
    assert (out.id, out.version, out.ready_state, out.uptime_ns) == (
        "inference:0",
        "9.9",
        ss.SERVER_READY,
        77,
    )
    assert (out.status_stats.success.count, out.status_stats.success.total_time_ns) == (1, 5)
    m = out.model_status["m"]
    assert m.config.name == "m"
    v1 = m.version_status[1]
    assert v1.ready_state == ss.MODEL_READY
    assert (v1.model_execution_count, v1.model_inference_count) == (2, 3)
    assert v1.last_inference_timestamp_milliseconds == 1234
    assert sorted(v1.infer_stats) == [0, 1, 2]  # by the request's batch size
    two = v1.infer_stats[2]
    assert (two.success.count, two.success.total_time_ns) == (1, 100)
    assert (two.failed.count, two.failed.total_time_ns) == (1, 50)
    assert (two.queue.count, two.queue.total_time_ns) == (1, 7)
    assert (two.compute.count, two.compute.total_time_ns) == (1, 60)
    one = v1.infer_stats[1]
    assert (one.success.count, one.success.total_time_ns) == (1, 40)
    assert (one.queue.count, one.queue.total_time_ns) == (1, 3)
    assert (one.compute.count, one.compute.total_time_ns) == (1, 60)
    assert not one.HasField("failed") or one.failed.count == 0
    unknown = v1.infer_stats[0]
    assert (unknown.failed.count, unknown.failed.total_time_ns) == (1, 9)
    assert unknown.success.count == 0
    v2 = m.version_status[2]
    assert (v2.ready_state, v2.ready_state_reason.message) == (ss.MODEL_UNAVAILABLE, "boom")
    assert not v2.infer_stats
    assert not out.model_status["gone"].version_status
    assert not out.model_status["gone"].HasField("config")


def test_labels_read_at_load_or_the_load_fails(tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_text("cat\ndog\n\nbird\n", encoding="utf-8")
    assert read_labels(CONFIG, tmp_path) == {"P": ("cat", "dog", "", "bird")}
    missing = tmp_path / "elsewhere"
    with pytest.raises(
        ValueError, match=r"failed to open text file for read .*labels\.txt: No such"
    ):
        read_labels(CONFIG, missing)
