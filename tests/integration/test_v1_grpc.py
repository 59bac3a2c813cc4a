"""The legacy v1 gRPC API (nvidia.inferenceserver.GRPCService) end to end.

A real server, NVIDIA's 1.11 message classes and stub (tests/v1_reference.py), beside
tritonclient on the same models: health, status (and v2 load/unload seen in it), raw and
classification inference, variable dims, sequences over StreamInfer and unary Infer,
v1 and v2 requests batched together, restricted protocols, and each class of bad input,
which answers gRPC OK with the error in request_status while the server keeps serving.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from server_process import REPO_ROOT, ServerProcess
from v1_reference import reference
from v1_support import (
    add_sub_request,
    build_repository,
    classes,
    header,
    infer_request,
    output,
    seq_request,
)

SERVER_ID = "inference:0"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("v1_repo"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    args = ["--model-control-mode", "explicit", "--load-model", "*"]
    with running_server([repo], args) as proc:
        yield proc


@pytest.fixture(scope="module")
def stub(server: ServerProcess) -> Iterator[Any]:
    with grpc.insecure_channel(server.url) as channel:
        yield reference().stub(channel)


@pytest.fixture(scope="module")
def v2(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.url) as client:
        yield client


def ok(status: Any) -> None:
    assert status.code == reference().code("SUCCESS"), status
    assert status.server_id == SERVER_ID


def failed(status: Any, code: str, message: str) -> None:
    assert status.code == reference().code(code), status
    assert message in status.msg, status.msg
    assert status.server_id == SERVER_ID


def add_sub_serves(stub: Any) -> None:
    a = np.array([[1, 2, 3]], dtype=np.float32)
    response = stub.Infer(add_sub_request(a, a), timeout=30)
    ok(response.request_status)
    np.testing.assert_array_equal(output(response, 0, np.float32), a + a)


# ----------------------------------------------------------------------------- health, status


def test_health_live_ready_and_unknown_mode(stub: Any) -> None:
    ref = reference()
    live = stub.Health(ref.HealthRequest(mode="live"), timeout=10)
    ready = stub.Health(ref.HealthRequest(mode="ready"), timeout=10)
    assert live.health and ready.health
    ok(live.request_status)
    assert ready.request_status.request_id > live.request_status.request_id > 0
    bad = stub.Health(ref.HealthRequest(mode="alive"), timeout=10)
    assert not bad.health
    failed(bad.request_status, "UNKNOWN", "unknown health mode 'alive'")


def test_status_reports_server_models_configs_and_versions(stub: Any) -> None:
    ref = reference()
    response = stub.Status(ref.StatusRequest(), timeout=10)
    ok(response.request_status)
    status = response.server_status
    assert status.id == SERVER_ID
    assert status.version
    assert status.uptime_ns > 0
    assert status.ready_state == ref.enums["ServerReadyState"].values_by_name["SERVER_READY"].number
    # Under today's protobuf the reference's maps are real maps (classes built from its bytes).
    models = status.model_status
    assert {"add_sub", "classifier", "classifier_nobatch", "strings", "seq"} <= set(models)
    classifier = models["classifier"]
    assert classifier.config.name == "classifier"
    assert classifier.config.platform == "onnxruntime_onnx"
    assert classifier.config.max_batch_size == 4
    assert classifier.config.output[0].label_filename == "labels.txt"
    assert classifier.config.input[0].data_type == 11  # TYPE_FP32
    ready = ref.enums["ModelReadyState"].values_by_name["MODEL_READY"].number
    assert classifier.version_status[1].ready_state == ready
    assert status.status_stats.success.count >= 0


def test_status_of_one_model_and_of_an_unknown_one(stub: Any) -> None:
    ref = reference()
    one = stub.Status(ref.StatusRequest(model_name="seq"), timeout=10)
    ok(one.request_status)
    assert list(one.server_status.model_status) == ["seq"]
    seq_config = one.server_status.model_status["seq"].config
    assert seq_config.WhichOneof("scheduling_choice") == "sequence_batching"
    unknown = stub.Status(ref.StatusRequest(model_name="nope"), timeout=10)
    failed(unknown.request_status, "INVALID_ARG", "no status available for unknown model 'nope'")
    assert not unknown.HasField("server_status")


def test_status_statistics_count_v1_and_v2_requests_alike(
    stub: Any, v2: grpcclient.InferenceServerClient
) -> None:
    ref = reference()

    def v1_success() -> int:
        status = stub.Status(ref.StatusRequest(model_name="add_sub"), timeout=10).server_status
        return int(status.model_status["add_sub"].version_status[1].infer_stats[1].success.count)

    def v2_success() -> int:
        stats = v2.get_inference_statistics("add_sub", "1", as_json=True)["model_stats"][0]
        return int(stats["inference_stats"]["success"].get("count", 0))

    before = v1_success()
    assert before == v2_success()
    add_sub_serves(stub)
    a = np.ones((1, 3), dtype=np.float32)
    inputs = [grpcclient.InferInput(n, [1, 3], "FP32") for n in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(a)
    v2.infer("add_sub", inputs)
    assert v1_success() == v2_success() == before + 2
    status = stub.Status(ref.StatusRequest(model_name="add_sub"), timeout=10).server_status
    version = status.model_status["add_sub"].version_status[1]
    assert version.model_inference_count >= 2 and version.model_execution_count >= 2
    assert version.infer_stats[1].compute.count == version.infer_stats[1].success.count
    assert version.last_inference_timestamp_milliseconds > 0


def test_status_infer_stats_are_keyed_by_request_batch_size(
    stub: Any, v2: grpcclient.InferenceServerClient
) -> None:
    """As Triton 1.x's status: no entry before a version's first request, then one per
    batch size its requests had (v1's header batch_size, v2's first dimension), each
    with that size's success, queue and compute counts."""
    ref = reference()
    v2.unload_model("add_sub")
    v2.load_model("add_sub")  # a fresh version: no statistics yet

    def version() -> Any:
        status = stub.Status(ref.StatusRequest(model_name="add_sub"), timeout=10).server_status
        return status.model_status["add_sub"].version_status[1]

    assert len(version().infer_stats) == 0
    for rows in (1, 3, 3):
        a = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
        response = stub.Infer(add_sub_request(a, a), timeout=30)
        ok(response.request_status)
        assert response.meta_data.batch_size == rows
    b = np.ones((2, 3), dtype=np.float32)
    inputs = [grpcclient.InferInput(n, [2, 3], "FP32") for n in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(b)
    v2.infer("add_sub", inputs)
    got = version()
    assert sorted(got.infer_stats) == [1, 2, 3]
    counts = {size: s.success.count for size, s in got.infer_stats.items()}
    assert counts == {1: 1, 2: 1, 3: 2}
    for size, s in got.infer_stats.items():
        assert s.queue.count == s.compute.count == s.success.count, size
        assert s.success.total_time_ns > 0 and s.failed.count == 0, size
    assert got.model_inference_count == 1 + 3 + 3 + 2
    v2_stats = v2.get_inference_statistics("add_sub", "1", as_json=True)["model_stats"][0]
    assert int(v2_stats["inference_stats"]["success"]["count"]) == sum(counts.values())


def test_v2_unload_and_load_show_in_v1_status_and_v1_model_control(
    stub: Any, v2: grpcclient.InferenceServerClient
) -> None:
    ref = reference()
    ready = ref.enums["ModelReadyState"].values_by_name["MODEL_READY"].number

    def versions() -> dict[int, int]:
        status = stub.Status(ref.StatusRequest(), timeout=10).server_status
        return {v: s.ready_state for v, s in status.model_status["strings"].version_status.items()}

    assert versions() == {1: ready}
    v2.unload_model("strings")
    assert ready not in versions().values()
    v2.load_model("strings")
    assert versions() == {1: ready}
    Control = ref.ModelControlRequest
    unload = stub.ModelControl(Control(model_name="strings", type=Control.UNLOAD), timeout=30)
    ok(unload.request_status)
    assert not v2.is_model_ready("strings")
    load = stub.ModelControl(Control(model_name="strings", type=Control.LOAD), timeout=30)
    ok(load.request_status)
    assert v2.is_model_ready("strings")
    missing = stub.ModelControl(Control(model_name="absent", type=Control.LOAD), timeout=30)
    assert missing.request_status.code != ref.code("SUCCESS")
    assert "absent" in missing.request_status.msg


def test_repository_index_and_shared_memory_control(stub: Any) -> None:
    ref = reference()
    index = stub.Repository(ref.RepositoryRequest(index=True), timeout=10)
    ok(index.request_status)
    assert {"add_sub", "classifier", "seq"} <= {m.name for m in index.index.models}
    unset = stub.Repository(ref.RepositoryRequest(), timeout=10)
    failed(unset.request_status, "UNKNOWN", "request type is not specified")

    Shm = ref.SharedMemoryControlRequest
    status = stub.SharedMemoryControl(Shm(status=Shm.Status()), timeout=10)
    ok(status.request_status)
    assert status.HasField("shared_memory_status")
    assert not status.shared_memory_status.shared_memory_region
    assert stub.SharedMemoryControl(Shm(unregister_all=Shm.UnregisterAll()), timeout=10)
    register = Shm(
        register=Shm.Register(
            name="r",
            byte_size=64,
            system_shared_memory=Shm.Register.SystemSharedMemoryIdentifier(shared_memory_key="/r"),
        )
    )
    refused = stub.SharedMemoryControl(register, timeout=10)
    failed(refused.request_status, "UNSUPPORTED", "failed to register shared memory region: 'r'")


# ----------------------------------------------------------------------------- inference


def test_infer_raw_outputs_with_variable_dims(stub: Any) -> None:
    a = np.arange(10, dtype=np.float32).reshape(2, 5)
    b = np.full((2, 5), 3, dtype=np.float32)
    response = stub.Infer(add_sub_request(a, b, id=77), timeout=30)
    ok(response.request_status)
    meta = response.meta_data
    assert (meta.id, meta.model_name, meta.model_version, meta.batch_size) == (77, "add_sub", 1, 2)
    assert [o.name for o in meta.output] == ["OUTPUT0", "OUTPUT1"]
    assert list(meta.output[0].raw.dims) == [5]
    assert meta.output[0].raw.batch_byte_size == 40
    np.testing.assert_array_equal(output(response, 0, np.float32), a + b)
    np.testing.assert_array_equal(output(response, 1, np.float32), a - b)


def test_infer_a_named_version_and_only_the_requested_outputs(stub: Any) -> None:
    a = np.ones((1, 2), dtype=np.float32)
    head = header(1, [("INPUT0", [2]), ("INPUT1", [2])], ["OUTPUT1"])
    response = stub.Infer(infer_request("add_sub", head, [a.tobytes()] * 2, version=1), timeout=30)
    ok(response.request_status)
    assert [o.name for o in response.meta_data.output] == ["OUTPUT1"]
    assert len(response.raw_output) == 1
    missing = stub.Infer(infer_request("add_sub", head, [a.tobytes()] * 2, version=9), timeout=30)
    assert missing.request_status.code != reference().code("SUCCESS")
    assert "add_sub" in missing.request_status.msg


def test_classification_batched_with_labels(stub: Any) -> None:
    x = np.array([[0.1, 0.9, 0.3, 0.2], [4, 1, 2, 3]], dtype=np.float32)
    head = header(2, [("INPUT", [4])], [("PROB", 3)])
    response = stub.Infer(infer_request("classifier", head, [x.tobytes()]), timeout=30)
    ok(response.request_status)
    out = response.meta_data.output[0]
    assert out.name == "PROB" and not out.HasField("raw")
    assert classes(out) == [
        [(1, 0.9, "one"), (2, 0.3, "two"), (3, 0.2, "three")],
        [(0, 4.0, "zero"), (3, 3.0, "three"), (2, 2.0, "two")],
    ]
    assert response.raw_output == [b""]


def test_classification_unbatched_clamps_the_count_and_mixes_with_raw(stub: Any) -> None:
    x = np.array([5, 7, 6, 1], dtype=np.float32)
    head = header(1, [], [("PROB", 10)])
    head.input.add(name="INPUT")  # fixed dims [4]: none needed
    response = stub.Infer(infer_request("classifier_nobatch", head, [x.tobytes()]), timeout=30)
    ok(response.request_status)
    assert classes(response.meta_data.output[0]) == [
        [(1, 7.0, "one"), (2, 6.0, "two"), (0, 5.0, "zero"), (3, 1.0, "three")]
    ]


def test_sequence_over_stream_in_order(stub: Any) -> None:
    """Two interleaved sequences on one stream: each request reaches its sequence's slot in
    order, and responses come back in request order."""
    steps = [
        seq_request(11, 1, start=True),
        seq_request(22, 100, start=True),
        seq_request(11, 2),
        seq_request(22, 200),
        seq_request(11, 3, end=True),
        seq_request(22, 300, end=True),
    ]
    responses = list(stub.StreamInfer(iter(steps), timeout=60))
    for response in responses:
        ok(response.request_status)
    assert [r.meta_data.id for r in responses] == [1, 100, 2, 200, 3, 300]
    sums = [int(output(r, 0, np.int32)[0, 0]) for r in responses]
    assert sums == [1, 100, 3, 300, 6, 600]


def test_sequence_over_unary_infer_with_correlation_ids(stub: Any) -> None:
    sums = []
    for value, start, end in ((5, True, False), (6, False, False), (7, False, True)):
        response = stub.Infer(seq_request(33, value, start=start, end=end), timeout=30)
        ok(response.request_status)
        sums.append(int(output(response, 0, np.int32)[0, 0]))
    assert sums == [5, 11, 18]
    no_id = stub.Infer(seq_request(0, 1, start=True), timeout=30)
    failed(no_id.request_status, "INVALID_ARG", "seq")


def test_stream_errors_in_band_and_the_stream_goes_on(stub: Any) -> None:
    a = np.ones((1, 2), dtype=np.float32)
    good = add_sub_request(a, a)
    bad = add_sub_request(a, a, model="add_sub")
    bad.meta_data.batch_size = 0
    responses = list(stub.StreamInfer(iter([good, bad, good]), timeout=60))
    ok(responses[0].request_status)
    failed(responses[1].request_status, "INVALID_ARG", "batch-size must be >= 1")
    ok(responses[2].request_status)


def test_v1_and_v2_requests_batch_together(server: ServerProcess) -> None:
    """add_sub_batched waits (up to 5 s) for two requests: one v1 and one v2 make one batch."""
    a = np.ones((1, 4), dtype=np.float32)
    with (
        grpc.insecure_channel(server.url) as channel,
        grpcclient.InferenceServerClient(server.url) as v2,
    ):
        stub = reference().stub(channel)
        result: dict[str, Any] = {}

        def v1_call() -> None:
            result["v1"] = stub.Infer(add_sub_request(a, a, model="add_sub_batched"), timeout=30)

        thread = threading.Thread(target=v1_call)
        thread.start()
        inputs = [grpcclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
        for item in inputs:
            item.set_data_from_numpy(a)
        answer = v2.infer("add_sub_batched", inputs)
        thread.join(30)
        ok(result["v1"].request_status)
        np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), a + a)
        stats = v2.get_inference_statistics("add_sub_batched", as_json=True)["model_stats"][0]
        assert int(stats["inference_count"]) == 2
        assert int(stats["execution_count"]) == 1
        assert [int(b["batch_size"]) for b in stats["batch_stats"]] == [2]


# ----------------------------------------------------------------------------- bad input


def _bad_requests() -> list[tuple[str, Any, str, str]]:
    a = np.ones((2, 3), dtype=np.float32)
    cases: list[tuple[str, Any, str, str]] = []

    def case(name: str, request: Any, code: str, message: str) -> None:
        cases.append((name, request, code, message))

    case("unknown model", add_sub_request(a, a, model="nope"), "NOT_FOUND", "'nope'")
    r = add_sub_request(a, a)
    r.meta_data.batch_size = 0
    case("batch size 0", r, "INVALID_ARG", "inference request batch-size must be >= 1")
    r = add_sub_request(np.ones((9, 3), np.float32), np.ones((9, 3), np.float32))
    case("batch too big", r, "INVALID_ARG", "inference request batch-size must be <= 8")
    r = add_sub_request(a, a)
    r.meta_data.input[1].name = "INPUT7"
    case("unknown input", r, "INVALID_ARG", "unexpected inference input 'INPUT7'")
    r = add_sub_request(a, a)
    r.meta_data.output.add(name="OUTPUT9")
    case("unknown output", r, "INVALID_ARG", "unexpected inference output 'OUTPUT9'")
    r = add_sub_request(a, a)
    del r.raw_input[1]
    case("missing data", r, "INVALID_ARG", "expected tensor data for at least 1 inputs")
    r = add_sub_request(a, a)
    r.raw_input[0] = r.raw_input[0][:-1]
    case("short data", r, "INVALID_ARG", "unexpected size 23 for input 'INPUT0', expecting 24")
    r = add_sub_request(a, a)
    r.meta_data.input[0].ClearField("dims")
    case("no dims", r, "INVALID_ARG", "model supports variable-size for input 'INPUT0'")
    r = add_sub_request(a, a)
    r.meta_data.input[0].dims.append(3)
    case("wrong rank", r, "INVALID_ARG", "unexpected shape for input 'INPUT0'")
    r = add_sub_request(a, a)
    del r.meta_data.input[1]
    case("missing input", r, "INVALID_ARG", "expected 2 inputs but got 1 inputs")
    texts = b"\x01\x00\x00\x00x"
    r = infer_request("strings", header(1, [("INPUT0", [1])], [("OUTPUT0", 1)]), [texts])
    case("classes of strings", r, "INVALID_ARG", "due to unsupported type 'TYPE_STRING'")
    r = infer_request("strings", header(1, [("INPUT0", [1])], ["OUTPUT0"]), [b"\xff\xff\x00"])
    case("garbled string tensor", r, "INVALID_ARG", "INPUT0")
    r = add_sub_request(a, a)
    r.meta_data.input[0].shared_memory.name = "region"
    case("shared memory", r, "INVALID_ARG", "Unable to find shared memory region: 'region'")
    return cases


BAD = _bad_requests()


@pytest.mark.parametrize(
    ("request_", "code", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD]
)
def test_bad_input_answers_in_band_and_serving_goes_on(
    stub: Any, request_: Any, code: str, message: str
) -> None:
    response = stub.Infer(request_, timeout=30)  # gRPC status OK: no exception
    failed(response.request_status, code, message)
    assert not response.raw_output
    assert response.meta_data.id == request_.meta_data.id
    add_sub_serves(stub)


def test_strings_round_trip_with_batch_byte_size(stub: Any) -> None:
    data = b"\x02\x00\x00\x00hi\x03\x00\x00\x00abc"
    head = header(2, [("INPUT0", [1])], ["OUTPUT0"])
    head.input[0].batch_byte_size = len(data)
    response = stub.Infer(infer_request("strings", head, [data]), timeout=30)
    ok(response.request_status)
    assert response.raw_output[0] == data
    assert response.meta_data.output[0].raw.batch_byte_size == len(data)


@pytest.mark.parametrize("strict", [True, False])
def test_health_ready_follows_strict_readiness(tmp_path: Path, strict: bool) -> None:
    """A model that fails to load makes v1 "ready" false, unless --strict-readiness=false."""
    broken = tmp_path / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "1" / "model.onnx").write_bytes(b"not an onnx model")
    (broken / "config.pbtxt").write_text(
        'name: "broken" platform: "onnxruntime_onnx" max_batch_size: 0\n', encoding="utf-8"
    )
    args = [f"--strict-readiness={str(strict).lower()}", "--exit-on-error=false"]
    with running_server([tmp_path], args) as server, grpc.insecure_channel(server.url) as channel:
        ref = reference()
        stub = ref.stub(channel)
        ready = stub.Health(ref.HealthRequest(mode="ready"), timeout=10)
        ok(ready.request_status)
        assert ready.health is not strict
        assert stub.Health(ref.HealthRequest(mode="live"), timeout=10).health
        status = stub.Status(ref.StatusRequest(model_name="broken"), timeout=10)
        version = status.server_status.model_status["broken"].version_status[1]
        unavailable = ref.enums["ModelReadyState"].values_by_name["MODEL_UNAVAILABLE"].number
        assert version.ready_state == unavailable
        assert version.ready_state_reason.message


# ----------------------------------------------------------------------------- access


def test_header_forward_pattern_applies_to_v1_requests(tmp_path: Path) -> None:
    """--grpc-header-forward-pattern turns matching metadata of a v1 call into request
    parameters, as for v2 (the python 'params' model reports what it received)."""
    shutil.copytree(REPO_ROOT / "tests" / "python_models" / "params", tmp_path / "params")
    args = ["--grpc-header-forward-pattern", "MY_.*"]
    with running_server([tmp_path], args) as server, grpc.insecure_channel(server.url) as channel:
        stub = reference().stub(channel)
        head = header(1, [("INPUT0", [1])], ["PARAMS"])
        request = infer_request("params", head, [np.ones(1, np.float32).tobytes()])
        metadata = (("my_h", "from v1"), ("other", "x"))
        response = stub.Infer(request, metadata=metadata, timeout=60)
        ok(response.request_status)
        (seen,) = reference_strings(response.raw_output[0])
        assert json.loads(seen) == {"my_h": "from v1"}


def reference_strings(raw: bytes) -> list[str]:
    """A STRING tensor's elements (4-byte little-endian length, then the bytes)."""
    out, offset = [], 0
    while offset < len(raw):
        size = int.from_bytes(raw[offset : offset + 4], "little")
        out.append(raw[offset + 4 : offset + 4 + size].decode("utf-8"))
        offset += 4 + size
    return out


def test_restricted_protocols_refuse_v1_calls_in_band(repo: Path) -> None:
    args = ["--grpc-restricted-protocol=inference,metadata:v1key=s3cret"]
    with running_server([repo], args) as server, grpc.insecure_channel(server.url) as channel:
        ref = reference()
        stub = ref.stub(channel)
        a = np.ones((1, 2), dtype=np.float32)
        expect = "This protocol is restricted, expecting header 'triton-grpc-protocol-v1key'"
        refused = stub.Infer(add_sub_request(a, a), timeout=30)
        failed(refused.request_status, "UNAVAILABLE", expect)
        streamed = list(stub.StreamInfer(iter([add_sub_request(a, a)]), timeout=30))
        assert len(streamed) == 1
        failed(streamed[0].request_status, "UNAVAILABLE", expect)
        status = stub.Status(ref.StatusRequest(), timeout=10)
        failed(status.request_status, "UNAVAILABLE", expect)
        key = (("triton-grpc-protocol-v1key", "s3cret"),)
        allowed = stub.Infer(add_sub_request(a, a), metadata=key, timeout=30)
        ok(allowed.request_status)
        assert stub.Status(ref.StatusRequest(), metadata=key, timeout=10).server_status.id
        ok(stub.Health(ref.HealthRequest(mode="live"), timeout=10).request_status)  # open
        assert "refused: restricted protocol" in server.log
