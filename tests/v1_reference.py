"""NVIDIA's own v1 protocol (the ``tensorrtserver==1.11.0`` wheel) as the tests' reference.

The wheel's client part (``libcrequest.so``) needs OpenSSL 1.1, which Debian 12 lacks, and
its ``_pb2`` modules are protobuf-3 era generated code that only the pure-Python protobuf
runtime executes (``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python``, chosen once per
process). So:

- ``executed_descriptors()`` runs the ``_pb2`` modules, loaded by file path (never through
  the package's ``__init__``), in a subprocess under the pure-Python runtime and returns
  each file's serialized ``FileDescriptorProto``;
- ``reference()`` gives message classes built, in this process and its protobuf runtime,
  from the very descriptor bytes those modules embed (read from their source, not
  executed), in a private pool, plus a gRPC stub class from the wheel's own
  ``grpc_service_pb2_grpc.py``. tests/compat/test_v1_descriptors.py checks that both
  routes give the same bytes.

Only the standard library, protobuf and grpc: usable in the client environment.
"""

from __future__ import annotations

import ast
import base64
import importlib.util
import os
import subprocess
import sys
import types
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

#: The wheel's modules, in dependency order.
MODULES = ("request_status", "model_config", "api", "server_status", "grpc_service")


def reference_dir() -> Path:
    """The installed wheel's ``tensorrtserver/api`` folder (tests/requirements-client.txt)."""
    try:
        dist = metadata.distribution("tensorrtserver")
    except metadata.PackageNotFoundError:
        pytest.skip("tensorrtserver==1.11.0 is not installed (run in .venv-client)")
    return Path(str(dist.locate_file("tensorrtserver/api")))


def embedded_descriptor(path: Path) -> bytes:
    """The serialized FileDescriptorProto a protoc-3 ``_pb2.py`` passes as ``serialized_pb``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg != "serialized_pb":
                continue
            value = keyword.value
            if isinstance(value, ast.Call) and value.args:  # _b('...'): latin-1 encoded
                value = value.args[0]
            literal = ast.literal_eval(value)
            return literal if isinstance(literal, bytes) else literal.encode("latin-1")
    raise AssertionError(f"no serialized_pb in {path}")


# Runs in a subprocess under the pure-Python protobuf runtime: imports the wheel's _pb2
# modules by path under their own names, with stand-in packages so that neither
# tensorrtserver/__init__.py nor tensorrtserver/api/__init__.py (which load the native
# client library) runs; prints "<module> <base64 serialized FileDescriptorProto>".
_EXECUTE = r"""
import base64, importlib.util, sys, types
folder = sys.argv[1]
for name, path in (("tensorrtserver", folder.rsplit("/", 1)[0]), ("tensorrtserver.api", folder)):
    package = types.ModuleType(name)
    package.__path__ = [path]
    sys.modules[name] = package
for module in sys.argv[2:]:
    full = f"tensorrtserver.api.{module}_pb2"
    spec = importlib.util.spec_from_file_location(full, f"{folder}/{module}_pb2.py")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[full] = loaded
    spec.loader.exec_module(loaded)
    setattr(sys.modules["tensorrtserver.api"], f"{module}_pb2", loaded)
    assert loaded.DESCRIPTOR.package == "nvidia.inferenceserver", loaded.DESCRIPTOR.package
    print(module, base64.b64encode(loaded.DESCRIPTOR.serialized_pb).decode("ascii"))
"""


@cache
def executed_descriptors() -> dict[str, bytes]:
    """Each module's descriptor bytes, as the executed ``_pb2`` module holds them."""
    folder = reference_dir()
    env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
    proc = subprocess.run(
        [sys.executable, "-c", _EXECUTE, str(folder), *MODULES],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"executing the tensorrtserver _pb2 modules failed:\n{proc.stderr}")
    out = {}
    for line in proc.stdout.splitlines():
        key, _, b64 = line.partition(" ")
        out[key] = base64.b64decode(b64)
    assert set(out) == set(MODULES), proc.stdout
    return out


@dataclass(frozen=True)
class Reference:
    """NVIDIA's v1 messages (by short name, e.g. ``InferRequestHeader``) and stub class."""

    messages: dict[str, Any]
    stub: Any
    enums: dict[str, Any]

    def code(self, name: str) -> int:
        """The number of a RequestStatusCode value (SUCCESS, INVALID_ARG, ...)."""
        return int(self.enums["RequestStatusCode"].values_by_name[name].number)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.messages[name]
        except KeyError:
            raise AttributeError(name) from None


@cache
def reference() -> Reference:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    folder = reference_dir()
    pool = descriptor_pool.DescriptorPool()
    files = {}
    for module in MODULES:
        fdp = descriptor_pb2.FileDescriptorProto.FromString(
            embedded_descriptor(folder / f"{module}_pb2.py")
        )
        pool.Add(fdp)
        files[module] = pool.FindFileByName(fdp.name)
    messages: dict[str, Any] = {}
    enums: dict[str, Any] = {}
    for file in files.values():
        for name, desc in file.message_types_by_name.items():
            messages[name] = message_factory.GetMessageClass(desc)
        enums.update(file.enum_types_by_name)

    # The wheel's stub module imports "from tensorrtserver.api import grpc_service_pb2":
    # hand it our reference classes under that name, then load the module by path.
    shim = types.SimpleNamespace(**messages)
    source = (folder / "grpc_service_pb2_grpc.py").read_text(encoding="utf-8")
    source = source.replace(
        "from tensorrtserver.api import grpc_service_pb2 as grpc__service__pb2",
        "grpc__service__pb2 = _SHIM",
    )
    spec = importlib.util.spec_from_loader("tensorrtserver_v1_stub", loader=None)
    assert spec is not None
    stub_module = importlib.util.module_from_spec(spec)
    stub_module._SHIM = shim  # type: ignore[attr-defined]
    exec(compile(source, str(folder / "grpc_service_pb2_grpc.py"), "exec"), stub_module.__dict__)
    return Reference(messages, stub_module.GRPCServiceStub, enums)
