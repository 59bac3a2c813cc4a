"""System and CUDA shared memory over REST, through the gateway, as tritonclient.http users
drive it: Triton's JSON for status, register bodies and inference tensors in regions; every
fault with Triton's HTTP status and text."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from conftest import running_gateway
from gateway_process import GatewayProcess, http_request
from server_process import ServerProcess
from shm_support import SLOW_MS, key_of, region, write_shm_models
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

INT32_BYTES = 16 * 4


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = write_shm_models(tmp_path_factory.mktemp("shm_repo"))
    with ServerProcess([repo]) as proc:
        yield proc


@pytest.fixture(scope="module")
def gateway(server: ServerProcess) -> Iterator[GatewayProcess]:
    with running_gateway(server.url) as gw:
        yield gw


@pytest.fixture
def client(gateway: GatewayProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(gateway.url)
    try:
        yield c
        c.unregister_system_shared_memory()
    finally:
        c.close()


def http_error(call: object) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()  # type: ignore[operator]
    return info.value


def add_sub_tensors(
    in_region: str, out_region: str | None
) -> tuple[list[httpclient.InferInput], list[httpclient.InferRequestedOutput]]:
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_shared_memory(in_region, INT32_BYTES)
    inputs[1].set_shared_memory(in_region, INT32_BYTES, offset=INT32_BYTES)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=True),
    ]
    if out_region is not None:
        outputs[0].set_shared_memory(out_region, INT32_BYTES)
        outputs[1].set_shared_memory(out_region, INT32_BYTES, offset=INT32_BYTES)
    return inputs, outputs


def test_simple_example_flow(client: httpclient.InferenceServerClient) -> None:
    """simple_http_shm_client.py, and Triton's status JSON (an array of regions)."""
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
        inputs, outputs = add_sub_tensors("input_data", "output_data")
        result = client.infer("simple", inputs, outputs=outputs)
        out0 = result.get_output("OUTPUT0")
        assert out0 == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}  # no data
        total = shm.get_contents_as_numpy(out_handle, np.int32, out0["shape"])
        difference = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16], INT32_BYTES)
        np.testing.assert_array_equal(total[0], in0 + in1)
        np.testing.assert_array_equal(difference[0], in0 - in1)
        assert client.get_system_shared_memory_status() == [
            {"name": "input_data", "key": key_of(in_handle), "offset": 0, "byte_size": 128},
            {"name": "output_data", "key": key_of(out_handle), "offset": 0, "byte_size": 128},
        ]
        assert client.get_system_shared_memory_status("input_data") == [
            {"name": "input_data", "key": key_of(in_handle), "offset": 0, "byte_size": 128}
        ]
        client.unregister_system_shared_memory("input_data")
        client.unregister_system_shared_memory()
        assert client.get_system_shared_memory_status() == []


def test_string_example_flow(client: httpclient.InferenceServerClient) -> None:
    """simple_http_shm_string_client.py."""
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
            httpclient.InferInput("INPUT0", [1, 16], "BYTES"),
            httpclient.InferInput("INPUT1", [1, 16], "BYTES"),
        ]
        inputs[0].set_shared_memory("str_in", size0)
        inputs[1].set_shared_memory("str_in", size1, offset=size0)
        outputs = [
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=True),
        ]
        outputs[0].set_shared_memory("str_out", out_size)
        outputs[1].set_shared_memory("str_out", out_size, offset=out_size)
        result = client.infer("simple_string", inputs, outputs=outputs)
        shape = result.get_output("OUTPUT0")["shape"]
        total = shm.get_contents_as_numpy(out_handle, np.object_, shape)
        difference = shm.get_contents_as_numpy(out_handle, np.object_, shape, out_size)
        assert [int(x) for x in total[0]] == [x + 1 for x in range(16)]
        assert [int(x) for x in difference[0]] == [x - 1 for x in range(16)]


def test_reuse_infer_objects(client: httpclient.InferenceServerClient) -> None:
    """reuse_infer_objects_client.py: the same InferInput objects switched between shared
    memory and data, and back."""
    in0 = np.arange(16, dtype=np.int32)
    in1 = np.ones(16, dtype=np.int32)
    with (
        region("in0", INT32_BYTES, in0) as h_in0,
        region("in1", INT32_BYTES, in1) as h_in1,
        region("out0", INT32_BYTES) as h_out0,
        region("out1", INT32_BYTES) as h_out1,
    ):
        for name, handle in (("in0", h_in0), ("in1", h_in1), ("out0", h_out0), ("out1", h_out1)):
            client.register_system_shared_memory(name, key_of(handle), INT32_BYTES)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "INT32"),
            httpclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        outputs = [
            httpclient.InferRequestedOutput("OUTPUT0"),
            httpclient.InferRequestedOutput("OUTPUT1"),
        ]
        for use_shm in (True, False, True):
            second = in1 if use_shm else in1 * 2
            if use_shm:
                inputs[0].set_shared_memory("in0", INT32_BYTES)
                inputs[1].set_shared_memory("in1", INT32_BYTES)
                outputs[0].set_shared_memory("out0", INT32_BYTES)
                outputs[1].set_shared_memory("out1", INT32_BYTES)
            else:
                inputs[0].set_data_from_numpy(in0[None])
                inputs[1].set_data_from_numpy(second[None])
                outputs[0].unset_shared_memory()
                outputs[1].unset_shared_memory()
            result = client.infer("simple", inputs, outputs=outputs)
            if use_shm:
                total = shm.get_contents_as_numpy(h_out0, np.int32, [1, 16])[0]
                difference = shm.get_contents_as_numpy(h_out1, np.int32, [1, 16])[0]
            else:
                total = result.as_numpy("OUTPUT0")[0]
                difference = result.as_numpy("OUTPUT1")[0]
            np.testing.assert_array_equal(total, in0 + second)
            np.testing.assert_array_equal(difference, in0 - second)


def test_faults(client: httpclient.InferenceServerClient) -> None:
    with region("faults", 2 * INT32_BYTES, np.arange(32, dtype=np.int32)) as handle:
        error = http_error(lambda: client.register_system_shared_memory("r", "/no_such", 8))
        assert (error.status(), error.message()) == (
            "500",
            "Unable to open shared memory region: '/no_such'",
        )
        error = http_error(lambda: client.register_system_shared_memory("r", key_of(handle), 999))
        assert (error.status(), error.message()) == (
            "400",
            "failed to register shared memory region 'r': invalid args",
        )
        client.register_system_shared_memory("r", key_of(handle), 2 * INT32_BYTES)
        error = http_error(lambda: client.register_system_shared_memory("r", key_of(handle), 8))
        assert (error.status(), error.message()) == (
            "400",
            "shared memory region 'r' already in manager",
        )
        error = http_error(lambda: client.get_system_shared_memory_status("ghost"))
        assert (error.status(), error.message()) == (
            "404",
            "Unable to find system shared memory region: 'ghost'",
        )
        inputs, outputs = add_sub_tensors("ghost", None)
        error = http_error(lambda: client.infer("simple", inputs, outputs=outputs))
        assert (error.status(), error.message()) == (
            "404",
            "Unable to find shared memory region: 'ghost'",
        )
        inputs, _ = add_sub_tensors("r", None)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)]
        outputs[0].set_shared_memory("r", INT32_BYTES - 4)
        error = http_error(lambda: client.infer("simple", inputs, outputs=outputs))
        assert (error.status(), error.message()) == (
            "500",
            "shared memory size specified with the request for output 'OUTPUT0' (60 bytes) "
            "should be at least 64 bytes to hold the results",
        )
        inputs[1].set_shared_memory("r", INT32_BYTES, offset=INT32_BYTES + 4)
        error = http_error(lambda: client.infer("simple", inputs))
        assert (error.status(), error.message()) == (
            "400",
            "Invalid offset + byte size for shared memory region: 'r'",
        )


def test_raw_register_bodies_and_routes(gateway: GatewayProcess) -> None:
    """Triton's texts for register bodies it reads itself; a missing region name has no
    route (Triton's regex needs one too)."""
    base = "/v2/systemsharedmemory"
    reply = http_request(gateway.url, "POST", f"{base}/region/r/register", {"byte_size": 8})
    assert (reply.status, reply.error) == (400, "Shared memory register request has no 'key' field")
    reply = http_request(gateway.url, "POST", f"{base}/region//register", {"key": "/k"})
    assert reply.status == 404
    reply = http_request(gateway.url, "POST", f"{base}/unregister")
    assert (reply.status, reply.body) == (200, b"")
    reply = http_request(gateway.url, "GET", f"{base}/status")
    assert (reply.status, reply.json()) == (200, [])


def test_unregister_while_in_use(
    client: httpclient.InferenceServerClient, gateway: GatewayProcess
) -> None:
    values = np.arange(1024, dtype=np.float32)
    with region("busy", 2 * values.nbytes, values) as handle:
        client.register_system_shared_memory("busy", key_of(handle), 2 * values.nbytes)
        tensor = httpclient.InferInput("INPUT0", [1024], "FP32")
        tensor.set_shared_memory("busy", values.nbytes)
        output = httpclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("busy", values.nbytes, offset=values.nbytes)
        finished = threading.Event()

        def run() -> None:  # its own client: a tritonclient.http client is one connection
            own = httpclient.InferenceServerClient(gateway.url)
            try:
                own.infer("slow_identity", [tensor], outputs=[output])
            finally:
                own.close()
                finished.set()

        threading.Thread(target=run, daemon=True).start()
        time.sleep(SLOW_MS / 3000)
        error = http_error(lambda: client.unregister_system_shared_memory("busy"))
        assert (error.status(), error.message()) == (
            "500",
            "Cannot unregister shared memory region 'busy', it is currently in use.",
        )
        assert finished.wait(30)
        copied = shm.get_contents_as_numpy(handle, np.float32, [1024], values.nbytes)
        np.testing.assert_array_equal(copied, values)
        client.unregister_system_shared_memory("busy")


def test_cuda_routes_without_a_gpu(
    client: httpclient.InferenceServerClient, gateway: GatewayProcess
) -> None:
    assert client.get_cuda_shared_memory_status() == []
    client.unregister_cuda_shared_memory()
    client.unregister_cuda_shared_memory("never")
    short = base64.b64encode(bytes(16)).decode()
    error = http_error(lambda: client.register_cuda_shared_memory("g", short, 0, 64))
    assert (error.status(), error.message()) == (
        "400",
        "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
    )
    handle = base64.b64encode(bytes(64)).decode()
    error = http_error(lambda: client.register_cuda_shared_memory("g", handle, 0, 64))
    assert (error.status(), error.message()) == (
        "400",
        "failed to register shared memory region: invalid args",
    )
    error = http_error(lambda: client.get_cuda_shared_memory_status("g"))
    assert (error.status(), error.message()) == (
        "404",
        "Unable to find cuda shared memory region: 'g'",
    )


def test_one_registry_for_rest_and_grpc(
    client: httpclient.InferenceServerClient, server: ServerProcess
) -> None:
    """The gateway's registrations are the server's (the engine's, when split): a region
    registered over REST serves gRPC requests on several connections, and one registered
    over gRPC is listed and unregistered over REST."""
    in0 = np.arange(16, dtype=np.int32)
    in1 = np.full(16, 5, dtype=np.int32)
    with region("rest_in", 2 * INT32_BYTES, in0, in1) as in_handle:
        client.register_system_shared_memory("rest_in", key_of(in_handle), 2 * INT32_BYTES)
        for _ in range(4):  # own connections: spread over the frontends when split
            with grpcclient.InferenceServerClient(
                server.url, channel_args=[("grpc.use_local_subchannel_pool", 1)]
            ) as g:
                inputs = [
                    grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                    grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
                ]
                inputs[0].set_shared_memory("rest_in", INT32_BYTES)
                inputs[1].set_shared_memory("rest_in", INT32_BYTES, offset=INT32_BYTES)
                result = g.infer("simple", inputs)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0")[0], in0 + in1)
        with grpcclient.InferenceServerClient(server.url) as g:
            g.register_system_shared_memory("grpc_in", key_of(in_handle), INT32_BYTES)
            names = [r["name"] for r in client.get_system_shared_memory_status()]
            assert names == ["grpc_in", "rest_in"]
            client.unregister_system_shared_memory("grpc_in")
            assert list(g.get_system_shared_memory_status(as_json=True)["regions"]) == ["rest_in"]
