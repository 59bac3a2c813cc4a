"""Our protos/trtis/*.proto must be wire-identical to NVIDIA's tensorrtserver 1.11 protocol.

Runs in the CLIENT environment, which has the ``tensorrtserver==1.11.0`` wheel
(tests/v1_reference.py explains how its protobuf-3 era modules are loaded). Our generated
modules are protobuf-7 gencode, so, as in test_proto_descriptors.py, a subprocess running
the SERVER interpreter prints their serialized FileDescriptorProtos. The same comparator
then checks every message, field (name, number, type, label, oneof, map), enum value and
the service's RPCs (names, request/response types, streaming).
"""

from __future__ import annotations

import base64
import copy
import subprocess
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from test_proto_descriptors import SERVICE_PYTHON, FieldProto, _report, compare_files
from v1_reference import MODULES, embedded_descriptor, executed_descriptors, reference_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
FDP = descriptor_pb2.FileDescriptorProto

_DUMP_OURS = r"""
import base64, sys
sys.path.insert(0, sys.argv[1])
from google.protobuf import descriptor_pb2
from trtis import api_pb2, grpc_service_pb2, model_config_pb2, request_status_pb2, server_status_pb2
for key, mod in (("request_status", request_status_pb2), ("model_config", model_config_pb2),
                 ("api", api_pb2), ("server_status", server_status_pb2),
                 ("grpc_service", grpc_service_pb2)):
    fdp = descriptor_pb2.FileDescriptorProto()
    mod.DESCRIPTOR.CopyToProto(fdp)
    print(key, base64.b64encode(fdp.SerializeToString()).decode("ascii"))
"""


def _ours() -> dict[str, FDP]:
    proc = subprocess.run(
        [SERVICE_PYTHON, "-c", _DUMP_OURS, str(REPO_ROOT / "protos")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"importing our trtis modules failed:\n{proc.stderr}"
    out = {}
    for line in proc.stdout.splitlines():
        key, _, b64 = line.partition(" ")
        out[key] = FDP.FromString(base64.b64decode(b64))
    assert set(out) == set(MODULES), proc.stdout
    return out


@pytest.fixture(scope="module")
def nvidia() -> dict[str, FDP]:
    return {key: FDP.FromString(raw) for key, raw in executed_descriptors().items()}


@pytest.fixture(scope="module")
def ours() -> dict[str, FDP]:
    return _ours()


def test_reference_is_nvidias_package(nvidia: dict[str, FDP]) -> None:
    assert {f.package for f in nvidia.values()} == {"nvidia.inferenceserver"}
    assert nvidia["grpc_service"].service[0].name == "GRPCService"


def test_descriptors_match_tensorrtserver_1_11(
    nvidia: dict[str, FDP], ours: dict[str, FDP]
) -> None:
    diffs = compare_files(nvidia, ours)
    assert not diffs, _report(diffs)


def test_every_v1_rpc_is_compared(nvidia: dict[str, FDP], ours: dict[str, FDP]) -> None:
    names = [m.name for m in nvidia["grpc_service"].service[0].method]
    assert names == [
        "Status",
        "Health",
        "Infer",
        "StreamInfer",
        "ModelControl",
        "SharedMemoryControl",
        "Repository",
    ]
    assert [m.name for m in ours["grpc_service"].service[0].method] == names


def test_embedded_bytes_equal_the_executed_modules() -> None:
    """The message classes the end-to-end tests build from the modules' source are the
    ones the modules themselves define (same descriptor bytes)."""
    folder = reference_dir()
    executed = executed_descriptors()
    for module in MODULES:
        assert embedded_descriptor(folder / f"{module}_pb2.py") == executed[module], module


def test_comparator_catches_v1_mutations(nvidia: dict[str, FDP], ours: dict[str, FDP]) -> None:
    mutated = copy.deepcopy(ours)
    api = mutated["api"]
    header = next(m for m in api.message_type if m.name == "InferRequestHeader")
    next(f for f in header.field if f.name == "correlation_id").number = 7
    status = next(e for e in mutated["request_status"].enum_type if e.name == "RequestStatusCode")
    next(v for v in status.value if v.name == "INVALID_ARG").number = 9
    stream = next(r for r in mutated["grpc_service"].service[0].method if r.name == "StreamInfer")
    stream.server_streaming = False
    version = next(
        m for m in mutated["server_status"].message_type if m.name == "ModelVersionStatus"
    )
    next(
        f for f in version.field if f.name == "model_execution_count"
    ).type = FieldProto.TYPE_UINT32
    diffs = compare_files(nvidia, mutated)
    text = "\n".join(diffs)
    assert len(diffs) == 4, _report(diffs)
    assert "InferRequestHeader.correlation_id number 7 != Triton's 4" in text
    assert "RequestStatusCode.INVALID_ARG number 9 != Triton's 5" in text
    assert "StreamInfer server_streaming False != Triton's True" in text
    assert "ModelVersionStatus.model_execution_count type 'uint32' != Triton's 'uint64'" in text
