"""System and CUDA shared memory over gRPC, as a Triton user drives it: regions made with
tritonclient.utils.shared_memory, registered, used for inputs and outputs (offsets, one
region for two requests, BYTES), and every fault answered with Triton's text and code."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from server_process import ServerProcess
from shm_support import SLOW_MS, key_of, region, write_shm_models
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

INT32_BYTES = 16 * 4


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = write_shm_models(tmp_path_factory.mktemp("shm_repo"))
    with ServerProcess([repo]) as proc:
        yield proc


@pytest.fixture
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.url) as c:
        yield c
        c.unregister_system_shared_memory()  # each test starts with none registered


def status_error(call: object) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()  # type: ignore[operator]
    return info.value


def test_simple_example_flow(client: grpcclient.InferenceServerClient) -> None:
    """simple_grpc_shm_client.py: two inputs in one region at offsets 0 and 64, two outputs
    in another, results read back from shared memory."""
    client.unregister_system_shared_memory()
    client.unregister_cuda_shared_memory()
    in0 = np.arange(16, dtype=np.int32)
    in1 = np.ones(16, dtype=np.int32)
    with (
        region("output_data", 2 * INT32_BYTES) as out_handle,
        region("input_data", 2 * INT32_BYTES, in0, in1) as in_handle,
    ):
        client.register_system_shared_memory("output_data", key_of(out_handle), 2 * INT32_BYTES)
        client.register_system_shared_memory("input_data", key_of(in_handle), 2 * INT32_BYTES)
        inputs = [
            grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
            grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        inputs[0].set_shared_memory("input_data", INT32_BYTES)
        inputs[1].set_shared_memory("input_data", INT32_BYTES, offset=INT32_BYTES)
        outputs = [
            grpcclient.InferRequestedOutput("OUTPUT0"),
            grpcclient.InferRequestedOutput("OUTPUT1"),
        ]
        outputs[0].set_shared_memory("output_data", INT32_BYTES)
        outputs[1].set_shared_memory("output_data", INT32_BYTES, offset=INT32_BYTES)
        result = client.infer("simple", inputs, outputs=outputs)
        # One (empty) raw entry per output, as Triton: the data is only in the region.
        assert list(result.get_response().raw_output_contents) == [b"", b""]
        out0 = result.get_output("OUTPUT0")
        assert (out0.datatype, list(out0.shape)) == ("INT32", [1, 16])
        total = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16])
        difference = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16], INT32_BYTES)
        np.testing.assert_array_equal(total[0], in0 + in1)
        np.testing.assert_array_equal(difference[0], in0 - in1)
        status = client.get_system_shared_memory_status(as_json=True)["regions"]
        assert status["input_data"] == {
            "name": "input_data",
            "key": key_of(in_handle),
            "byte_size": str(2 * INT32_BYTES),
        }
        client.unregister_system_shared_memory()
        assert client.get_system_shared_memory_status(as_json=True) == {}


def test_string_example_flow(client: grpcclient.InferenceServerClient) -> None:
    """simple_grpc_shm_string_client.py: BYTES tensors serialized into the regions."""
    in0 = np.array([str(x).encode() for x in range(16)], dtype=object)
    in1 = np.array([b"1"] * 16, dtype=object)
    wire0, wire1 = serialize_byte_tensor(in0), serialize_byte_tensor(in1)
    size0, size1 = len(wire0.item()), len(wire1.item())
    out_size = max(size0, size1) + 16
    with (
        region("str_out", 2 * out_size) as out_handle,
        region("str_in", size0 + size1, wire0, wire1) as in_handle,
    ):
        client.register_system_shared_memory("str_out", key_of(out_handle), 2 * out_size)
        client.register_system_shared_memory("str_in", key_of(in_handle), size0 + size1)
        inputs = [
            grpcclient.InferInput("INPUT0", [1, 16], "BYTES"),
            grpcclient.InferInput("INPUT1", [1, 16], "BYTES"),
        ]
        inputs[0].set_shared_memory("str_in", size0)
        inputs[1].set_shared_memory("str_in", size1, offset=size0)
        outputs = [
            grpcclient.InferRequestedOutput("OUTPUT0"),
            grpcclient.InferRequestedOutput("OUTPUT1"),
        ]
        outputs[0].set_shared_memory("str_out", out_size)
        outputs[1].set_shared_memory("str_out", out_size, offset=out_size)
        result = client.infer("simple_string", inputs, outputs=outputs)
        shape = result.get_output("OUTPUT0").shape
        total = shm.get_contents_as_numpy(out_handle, np.object_, shape)
        difference = shm.get_contents_as_numpy(out_handle, np.object_, shape, out_size)
        assert [int(x) for x in total[0]] == [x + 1 for x in range(16)]
        assert [int(x) for x in difference[0]] == [x - 1 for x in range(16)]


def test_mixed_shared_memory_and_wire_tensors(client: grpcclient.InferenceServerClient) -> None:
    """One input from a region, one raw; one output into a region, one in the response."""
    in0 = np.arange(16, dtype=np.int32) * 3
    in1 = np.full(16, 2, dtype=np.int32)
    with region("mix", 2 * INT32_BYTES, in0) as handle:
        client.register_system_shared_memory("mix", key_of(handle), 2 * INT32_BYTES)
        inputs = [
            grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
            grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        inputs[0].set_shared_memory("mix", INT32_BYTES)
        inputs[1].set_data_from_numpy(in1[None])
        outputs = [
            grpcclient.InferRequestedOutput("OUTPUT0"),
            grpcclient.InferRequestedOutput("OUTPUT1"),
        ]
        outputs[1].set_shared_memory("mix", INT32_BYTES, offset=INT32_BYTES)
        result = client.infer("simple", inputs, outputs=outputs)
        assert result.get_response().raw_output_contents[1] == b""
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0")[0], in0 + in1)
        difference = shm.get_contents_as_numpy(handle, np.int32, [1, 16], INT32_BYTES)
        np.testing.assert_array_equal(difference[0], in0 - in1)


def test_one_region_for_concurrent_requests(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    """Eight requests at once, each reading and writing its own slice of one region."""
    count, n = 8, 4096
    size = count * n * 4
    values = np.arange(count * n, dtype=np.float32)
    with region("shared", 2 * size, values) as handle:
        client.register_system_shared_memory("shared", key_of(handle), 2 * size)
        errors: list[BaseException] = []

        def one(index: int) -> None:
            try:
                with grpcclient.InferenceServerClient(server.url) as own:
                    tensor = grpcclient.InferInput("INPUT0", [n], "FP32")
                    tensor.set_shared_memory("shared", n * 4, offset=index * n * 4)
                    output = grpcclient.InferRequestedOutput("OUTPUT0")
                    output.set_shared_memory("shared", n * 4, offset=size + index * n * 4)
                    own.infer("identity_fp32", [tensor], outputs=[output])
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        copied = shm.get_contents_as_numpy(handle, np.float32, [count * n], size)
        np.testing.assert_array_equal(copied, values)


def test_wrong_sizes_and_places(client: grpcclient.InferenceServerClient) -> None:
    in0 = np.arange(16, dtype=np.int32)
    with region("sizes", 2 * INT32_BYTES, in0, in0) as handle:
        client.register_system_shared_memory("sizes", key_of(handle), 2 * INT32_BYTES)

        def infer(in_size: int, in_offset: int = 0, out_size: int | None = None) -> None:
            tensors = [
                grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            tensors[0].set_shared_memory("sizes", in_size, offset=in_offset)
            tensors[1].set_shared_memory("sizes", INT32_BYTES, offset=INT32_BYTES)
            outputs = [grpcclient.InferRequestedOutput("OUTPUT0")]
            if out_size is not None:
                outputs[0].set_shared_memory("sizes", out_size)
            client.infer("simple", tensors, outputs=outputs, request_id="7")

        error = status_error(lambda: infer(INT32_BYTES - 4))
        assert error.status() == "StatusCode.INVALID_ARGUMENT"
        assert error.message() == (
            "[request id: 7] input byte size mismatch for input 'INPUT0' for model 'simple'. "
            "Expected 64, got 60"
        )
        error = status_error(lambda: infer(INT32_BYTES, in_offset=2 * INT32_BYTES))
        assert error.status() == "StatusCode.INVALID_ARGUMENT"
        assert error.message() == "Invalid offset for shared memory region: 'sizes'"
        error = status_error(lambda: infer(INT32_BYTES, in_offset=INT32_BYTES + 4))
        assert error.message() == "Invalid offset + byte size for shared memory region: 'sizes'"
        error = status_error(lambda: infer(INT32_BYTES, out_size=INT32_BYTES - 4))
        assert error.status() == "StatusCode.INTERNAL"
        assert error.message() == (
            "shared memory size specified with the request for output 'OUTPUT0' (60 bytes) "
            "should be at least 64 bytes to hold the results"
        )
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
        tensor.set_shared_memory("ghost", INT32_BYTES)
        other = grpcclient.InferInput("INPUT1", [1, 16], "INT32")
        other.set_data_from_numpy(in0[None])
        error = status_error(lambda: client.infer("simple", [tensor, other]))
        assert error.status() == "StatusCode.NOT_FOUND"
        assert error.message() == "Unable to find shared memory region: 'ghost'"
        infer(INT32_BYTES)  # and the server still serves, the region still registered


def test_register_faults(client: grpcclient.InferenceServerClient) -> None:
    error = status_error(lambda: client.register_system_shared_memory("", "", 0))
    assert error.status() == "StatusCode.INTERNAL"
    assert error.message() == "Unable to open shared memory region: ''"
    error = status_error(lambda: client.register_system_shared_memory("r", "/no_such_shm", 64))
    assert error.message() == "Unable to open shared memory region: '/no_such_shm'"
    with region("faults", 128) as handle:
        error = status_error(lambda: client.register_system_shared_memory("r", key_of(handle), 129))
        assert error.status() == "StatusCode.INVALID_ARGUMENT"
        assert error.message() == "failed to register shared memory region 'r': invalid args"
        client.register_system_shared_memory("r", key_of(handle), 64, offset=64)
        error = status_error(lambda: client.register_system_shared_memory("r", key_of(handle), 8))
        assert error.status() == "StatusCode.ALREADY_EXISTS"
        assert error.message() == "shared memory region 'r' already in manager"
        error = status_error(lambda: client.get_system_shared_memory_status("ghost"))
        assert error.status() == "StatusCode.NOT_FOUND"
        assert error.message() == "Unable to find system shared memory region: 'ghost'"
        region_status = client.get_system_shared_memory_status("r", as_json=True)["regions"]["r"]
        assert (region_status["offset"], region_status["byte_size"]) == ("64", "64")


def test_unregister_while_in_use(server: ServerProcess) -> None:
    """A region a running request holds cannot go (Triton's text); once answered, it can,
    and the request's output is intact."""
    values = np.arange(1024, dtype=np.float32)
    size = values.nbytes
    with (
        region("busy", 2 * size, values) as handle,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        client.register_system_shared_memory("busy", key_of(handle), 2 * size)
        tensor = grpcclient.InferInput("INPUT0", [1024], "FP32")
        tensor.set_shared_memory("busy", size)
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("busy", size, offset=size)
        done = threading.Event()
        client.async_infer(
            "slow_identity", [tensor], lambda result, error: done.set(), outputs=[output]
        )
        time.sleep(SLOW_MS / 3000)  # the request is executing
        error = status_error(lambda: client.unregister_system_shared_memory("busy"))
        assert error.status() == "StatusCode.INTERNAL"
        assert error.message() == (
            "Cannot unregister shared memory region 'busy', it is currently in use."
        )
        error = status_error(client.unregister_system_shared_memory)
        assert error.message() == (
            "Failed to unregister the following system shared memory regions: busy ,"
        )
        assert done.wait(30)
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(handle, np.float32, [1024], size), values
        )
        client.unregister_system_shared_memory("busy")
        assert client.get_system_shared_memory_status(as_json=True) == {}


def test_unregister_with_nothing_registered(client: grpcclient.InferenceServerClient) -> None:
    client.unregister_system_shared_memory()
    client.unregister_system_shared_memory("never_registered")
    client.unregister_cuda_shared_memory()
    client.unregister_cuda_shared_memory("never_registered")


def test_regions_outlive_the_client_that_registered_them(server: ServerProcess) -> None:
    values = np.arange(16, dtype=np.float32)
    with region("lasting", 128, values) as handle:
        with grpcclient.InferenceServerClient(server.url) as first:
            first.register_system_shared_memory("lasting", key_of(handle), 128)
        with grpcclient.InferenceServerClient(server.url) as second:
            tensor = grpcclient.InferInput("INPUT0", [16], "FP32")
            tensor.set_shared_memory("lasting", 64)
            result = second.infer("identity_fp32", [tensor])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)
            second.unregister_system_shared_memory("lasting")


def test_statistics_count_shared_memory_requests(client: grpcclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("identity_fp32", as_json=True)["model_stats"][0]
    values = np.ones(8, dtype=np.float32)
    with region("stats", 64, values) as handle:
        client.register_system_shared_memory("stats", key_of(handle), 64)
        tensor = grpcclient.InferInput("INPUT0", [8], "FP32")
        tensor.set_shared_memory("stats", 32)
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("stats", 32, offset=32)
        for _ in range(3):
            client.infer("identity_fp32", [tensor], outputs=[output])
    after = client.get_inference_statistics("identity_fp32", as_json=True)["model_stats"][0]
    counted = int(after.get("inference_count", 0)) - int(before.get("inference_count", 0))
    assert counted == 3
    success = after["inference_stats"]["success"]
    assert int(success["count"]) - int(before["inference_stats"]["success"].get("count", 0)) == 3


def test_stream_infer_with_shared_memory(client: grpcclient.InferenceServerClient) -> None:
    """ModelStreamInfer reads and writes regions too."""
    values = np.arange(16, dtype=np.float32)
    results: list[object] = []
    done = threading.Event()

    def collect(result: object, error: object) -> None:
        results.append(error or result)
        done.set()

    with region("stream", 128, values) as handle:
        client.register_system_shared_memory("stream", key_of(handle), 128)
        tensor = grpcclient.InferInput("INPUT0", [16], "FP32")
        tensor.set_shared_memory("stream", 64)
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("stream", 64, offset=64)
        client.start_stream(collect)
        try:
            client.async_stream_infer("identity_fp32", [tensor], outputs=[output])
            assert done.wait(30)
        finally:
            client.stop_stream()
        assert not isinstance(results[0], InferenceServerException), results[0]
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(handle, np.float32, [16], 64), values
        )


def test_cuda_shared_memory_without_a_gpu(client: grpcclient.InferenceServerClient) -> None:
    """Triton's GPU build on a machine without a GPU: registration fails with its
    INVALID_ARGUMENT "invalid args"; status and unregistration work."""
    error = status_error(lambda: client.register_cuda_shared_memory("", b"", 0, 0))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert error.message() == "failed to register shared memory region: invalid args"
    error = status_error(lambda: client.register_cuda_shared_memory("g", bytes(64), 0, 64))
    assert error.message() == "failed to register shared memory region: invalid args"
    assert client.get_cuda_shared_memory_status(as_json=True) == {}
    error = status_error(lambda: client.get_cuda_shared_memory_status("g"))
    assert error.status() == "StatusCode.NOT_FOUND"
    assert error.message() == "Unable to find cuda shared memory region: 'g'"
    client.unregister_cuda_shared_memory()


def test_extensions_advertised(client: grpcclient.InferenceServerClient) -> None:
    extensions = list(client.get_server_metadata().extensions)
    assert "system_shared_memory" in extensions and "cuda_shared_memory" in extensions


@pytest.mark.gpu
def test_cuda_shared_memory_round_trip(
    client: grpcclient.InferenceServerClient, tmp_path: Path
) -> None:
    """simple_grpc_cudashm_client.py: inputs and outputs in device memory of GPU 0."""
    cudashm = pytest.importorskip("tritonclient.utils.cuda_shared_memory")
    in0 = np.arange(16, dtype=np.int32)
    in1 = np.ones(16, dtype=np.int32)
    out_handle = cudashm.create_shared_memory_region("cuda_out", 2 * INT32_BYTES, 0)
    in_handle = cudashm.create_shared_memory_region("cuda_in", 2 * INT32_BYTES, 0)
    try:
        cudashm.set_shared_memory_region(in_handle, [in0, in1])
        client.register_cuda_shared_memory(
            "cuda_out", cudashm.get_raw_handle(out_handle), 0, 2 * INT32_BYTES
        )
        client.register_cuda_shared_memory(
            "cuda_in", cudashm.get_raw_handle(in_handle), 0, 2 * INT32_BYTES
        )
        inputs = [
            grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
            grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        inputs[0].set_shared_memory("cuda_in", INT32_BYTES)
        inputs[1].set_shared_memory("cuda_in", INT32_BYTES, offset=INT32_BYTES)
        outputs = [
            grpcclient.InferRequestedOutput("OUTPUT0"),
            grpcclient.InferRequestedOutput("OUTPUT1"),
        ]
        outputs[0].set_shared_memory("cuda_out", INT32_BYTES)
        outputs[1].set_shared_memory("cuda_out", INT32_BYTES, offset=INT32_BYTES)
        client.infer("simple", inputs, outputs=outputs)
        both = cudashm.get_contents_as_numpy(out_handle, np.int32, [2, 16])
        np.testing.assert_array_equal(both[0], in0 + in1)
        np.testing.assert_array_equal(both[1], in0 - in1)
        status = client.get_cuda_shared_memory_status(as_json=True)["regions"]
        assert set(status) == {"cuda_in", "cuda_out"}
    finally:
        client.unregister_cuda_shared_memory()
        cudashm.destroy_shared_memory_region(in_handle)
        cudashm.destroy_shared_memory_region(out_handle)


def test_restricted_shared_memory_group(tmp_path: Path) -> None:
    """--grpc-restricted-protocol=shared-memory:... guards the six RPCs (Triton's text);
    inference stays open and can still name a region registered with the key."""
    key = {"triton-grpc-protocol-shm-key": "s3cret"}
    args = ["--grpc-restricted-protocol=shared-memory:shm-key=s3cret"]
    values = np.arange(16, dtype=np.float32)
    with (
        ServerProcess([write_shm_models(tmp_path)], args) as proc,
        grpcclient.InferenceServerClient(proc.url) as client,
        region("guarded", 128, values) as handle,
    ):
        for call in (
            client.get_system_shared_memory_status,
            client.unregister_system_shared_memory,
            client.get_cuda_shared_memory_status,
            lambda: client.register_system_shared_memory("g", key_of(handle), 64),
        ):
            error = status_error(call)
            assert error.status() == "StatusCode.UNAVAILABLE"
            assert error.message() == (
                "This protocol is restricted, expecting header 'triton-grpc-protocol-shm-key'"
            )
        client.register_system_shared_memory("g", key_of(handle), 128, headers=key)
        tensor = grpcclient.InferInput("INPUT0", [16], "FP32")
        tensor.set_shared_memory("g", 64)
        np.testing.assert_array_equal(
            client.infer("identity_fp32", [tensor]).as_numpy("OUTPUT0"), values
        )
        client.unregister_system_shared_memory(headers=key)
