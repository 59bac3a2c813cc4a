"""Restricted protocols (Triton's --grpc-restricted-protocol) seen by tritonclient.

A restricted RPC needs metadata ``triton-grpc-protocol-<key>: <value>``; without it, or with
a wrong value, the caller gets UNAVAILABLE "This protocol is restricted, expecting header
'triton-grpc-protocol-<key>'" and the RPC does not run. Groups not named stay open.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import add_sub_inputs, expect_error, running_server
from operations_support import HEALTH_CHECK, SERVING, decode_health, encode_health, write_add_sub
from server_process import ServerProcess
from tritonclient.grpc import service_pb2, service_pb2_grpc

INFER_KEY = {"triton-grpc-protocol-infer-key": "infer-s3cret"}
ADMIN_KEY = {"triton-grpc-protocol-admin": "admin-s3cret"}
RESTRICTED = "This protocol is restricted, expecting header '{}'"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("ops_access")
    write_add_sub(repo, "plain")
    args = [
        "--grpc-restricted-protocol=inference,health:Infer-Key=infer-s3cret",
        "--grpc-restricted-protocol=model-repository,logging,statistics:admin=admin-s3cret",
        "--model-control-mode=explicit",
        "--load-model=plain",
    ]
    with running_server([repo], extra_args=args) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.url) as c:
        yield c


A = np.ones((1, 3), dtype=np.float32)


def _refused(call: Callable[[], Any], header: str) -> None:
    expect_error(call, "UNAVAILABLE", RESTRICTED.format(header))


def test_inference_with_the_key_runs(client: grpcclient.InferenceServerClient) -> None:
    result = client.infer("plain", add_sub_inputs(A, A), headers=INFER_KEY)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + A)


@pytest.mark.parametrize(
    "headers",
    [{}, {"triton-grpc-protocol-infer-key": "wrong"}, {"triton-grpc-protocol-admin": "x"}],
    ids=["missing", "wrong-value", "other-key"],
)
def test_inference_without_the_right_key_is_refused_and_not_run(
    client: grpcclient.InferenceServerClient, headers: dict[str, str]
) -> None:
    before = client.get_inference_statistics("plain", headers=ADMIN_KEY)
    _refused(
        lambda: client.infer("plain", add_sub_inputs(A, A), headers=headers),
        "triton-grpc-protocol-infer-key",
    )
    after = client.get_inference_statistics("plain", headers=ADMIN_KEY)
    assert after == before  # not executed, not even counted as a failure


def test_health_group(client: grpcclient.InferenceServerClient, server: ServerProcess) -> None:
    _refused(client.is_server_live, "triton-grpc-protocol-infer-key")
    _refused(client.is_server_ready, "triton-grpc-protocol-infer-key")
    _refused(lambda: client.is_model_ready("plain"), "triton-grpc-protocol-infer-key")
    assert client.is_server_live(headers=INFER_KEY) is True
    # The standard health service belongs to the group too, as in Triton.
    with grpc.insecure_channel(server.url) as channel:
        check = channel.unary_unary(HEALTH_CHECK)
        with pytest.raises(grpc.RpcError) as info:
            check(encode_health(""), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        metadata = tuple(INFER_KEY.items())
        assert decode_health(check(encode_health(""), timeout=5, metadata=metadata)) == SERVING
        watch = channel.unary_stream("/grpc.health.v1.Health/Watch")
        with pytest.raises(grpc.RpcError) as info:
            next(iter(watch(encode_health(""), timeout=5)))
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        updates = watch(encode_health(""), timeout=5, metadata=metadata)
        assert decode_health(next(iter(updates))) == SERVING
        updates.cancel()


def test_stream_is_refused_without_the_key(server: ServerProcess) -> None:
    request = service_pb2.ModelInferRequest(model_name="plain", id="s")
    with grpc.insecure_channel(server.url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            list(stub.ModelStreamInfer(iter([request]), timeout=10))
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert info.value.details() == RESTRICTED.format("triton-grpc-protocol-infer-key")
        replies = list(
            stub.ModelStreamInfer(iter([request]), timeout=10, metadata=tuple(INFER_KEY.items()))
        )
        assert len(replies) == 1 and replies[0].infer_response.id == "s"


def test_admin_groups(client: grpcclient.InferenceServerClient) -> None:
    header = "triton-grpc-protocol-admin"
    _refused(lambda: client.get_model_repository_index(), header)
    _refused(lambda: client.unload_model("plain", headers=INFER_KEY), header)
    _refused(lambda: client.get_log_settings(), header)
    _refused(lambda: client.get_inference_statistics("plain"), header)
    assert client.is_model_ready("plain", headers=INFER_KEY)  # the unload never ran
    assert len(client.get_model_repository_index(headers=ADMIN_KEY).models) == 1
    assert client.get_log_settings(headers=ADMIN_KEY).settings["log_info"].bool_param


def test_unrestricted_groups_stay_open(client: grpcclient.InferenceServerClient) -> None:
    assert client.get_server_metadata().name
    assert client.get_model_metadata("plain").name == "plain"
    assert client.get_model_config("plain").config.name == "plain"


def test_keys_never_reach_the_log(
    client: grpcclient.InferenceServerClient, server: ServerProcess
) -> None:
    _refused(
        lambda: client.infer("plain", add_sub_inputs(A, A), headers={"x": "y"}),
        "triton-grpc-protocol-infer-key",
    )
    assert "refused: restricted protocol" in server.log
    assert "s3cret" not in server.log
