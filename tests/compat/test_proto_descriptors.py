"""Our protos/inference/*.proto must be wire-identical to Triton's published protocol.

Runs in the CLIENT environment (tritonclient, protobuf 6):

    .venv-client/bin/python -m pytest tests/compat

Our generated modules are protobuf-7 gencode and register the same full names
(``inference.ModelInferRequest`` ...) as tritonclient's, so they cannot be
imported here. Instead a subprocess running the SERVER interpreter
($SERVICE_PYTHON, default <repo>/.venv/bin/python) imports them and prints their
serialized FileDescriptorProtos; this test parses those bytes and compares them
with tritonclient's descriptors, message by message, field by field, RPC by RPC.
"""

from __future__ import annotations

import base64
import copy
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICE_PYTHON = os.environ.get("SERVICE_PYTHON", str(REPO_ROOT / ".venv" / "bin" / "python"))

FDP = descriptor_pb2.FileDescriptorProto
MsgProto = descriptor_pb2.DescriptorProto
EnumProto = descriptor_pb2.EnumDescriptorProto
FieldProto = descriptor_pb2.FieldDescriptorProto

# Runs under SERVICE_PYTHON: prints "<module> <base64 FileDescriptorProto>" per module.
_DUMP_SCRIPT = r"""
import base64, sys
sys.path.insert(0, sys.argv[1])
from google.protobuf import descriptor_pb2
from inference import grpc_service_pb2, model_config_pb2
for key, mod in (("grpc_service", grpc_service_pb2), ("model_config", model_config_pb2)):
    fdp = descriptor_pb2.FileDescriptorProto()
    mod.DESCRIPTOR.CopyToProto(fdp)
    print(key, base64.b64encode(fdp.SerializeToString()).decode("ascii"))
"""


# --------------------------------------------------------------------------- loading


def load_ours() -> dict[str, FDP]:
    """Descriptors of our generated modules, via the server interpreter."""
    if not Path(SERVICE_PYTHON).exists():
        pytest.fail(f"server interpreter not found: {SERVICE_PYTHON} (set SERVICE_PYTHON)")
    proc = subprocess.run(
        [SERVICE_PYTHON, "-c", _DUMP_SCRIPT, str(REPO_ROOT / "protos")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"importing our generated modules failed:\n{proc.stderr}")
    out: dict[str, FDP] = {}
    for line in proc.stdout.splitlines():
        key, _, b64 = line.partition(" ")
        fdp = FDP()
        fdp.ParseFromString(base64.b64decode(b64))
        out[key] = fdp
    assert set(out) == {"grpc_service", "model_config"}, proc.stdout
    return out


def load_triton() -> dict[str, FDP]:
    """Descriptors published by tritonclient (only in the client environment)."""
    pytest.importorskip("tritonclient.grpc", reason="run under .venv-client (needs tritonclient)")
    from tritonclient.grpc import model_config_pb2, service_pb2

    out: dict[str, FDP] = {}
    for key, mod in (("grpc_service", service_pb2), ("model_config", model_config_pb2)):
        fdp = FDP()
        mod.DESCRIPTOR.CopyToProto(fdp)
        out[key] = fdp
    return out


# --------------------------------------------------------------------------- comparator

_TYPE_NAMES = {v: k.removeprefix("TYPE_").lower() for k, v in FieldProto.Type.items()}
_LABEL_NAMES = {v: k.removeprefix("LABEL_").lower() for k, v in FieldProto.Label.items()}


def _walk(fdp: FDP) -> tuple[dict[str, MsgProto], dict[str, EnumProto]]:
    """All messages and enums of a file (nested included), keyed by full name."""
    messages: dict[str, MsgProto] = {}
    enums: dict[str, EnumProto] = {}

    def visit(scope: str, msgs: Iterable[MsgProto], ens: Iterable[EnumProto]) -> None:
        for e in ens:
            enums[f"{scope}.{e.name}"] = e
        for m in msgs:
            name = f"{scope}.{m.name}"
            messages[name] = m
            visit(name, m.nested_type, m.enum_type)

    visit(fdp.package, fdp.message_type, fdp.enum_type)
    return messages, enums


def _resolve(type_name: str, scope: str, known: set[str]) -> str:
    """Full name (no leading dot) of a field's type_name, as protoc would resolve it."""
    if not type_name:
        return ""
    if type_name.startswith("."):
        return type_name[1:]
    parts = scope.split(".")
    while parts:
        candidate = ".".join([*parts, type_name])
        if candidate in known:
            return candidate
        parts.pop()
    return type_name


def _field_facts(
    field: FieldProto,
    msg: MsgProto,
    scope: str,
    all_messages: dict[str, MsgProto],
    known: set[str],
) -> dict[str, object]:
    type_name = _resolve(field.type_name, scope, known)
    target = all_messages.get(type_name)
    return {
        "name": field.name,
        "type": _TYPE_NAMES.get(field.type, field.type),
        "type_name": type_name,
        "label": _LABEL_NAMES.get(field.label, field.label),
        "proto3_optional": field.proto3_optional,
        "oneof": msg.oneof_decl[field.oneof_index].name if field.HasField("oneof_index") else None,
        "map": bool(
            field.label == FieldProto.LABEL_REPEATED
            and target is not None
            and target.options.map_entry
        ),
        "packed": field.options.packed if field.options.HasField("packed") else None,
        "json_name": field.json_name if field.HasField("json_name") else None,
    }


def compare_files(triton: dict[str, FDP], ours: dict[str, FDP]) -> list[str]:
    """Every difference between Triton's descriptors and ours, as readable lines."""
    diffs: list[str] = []

    for key in sorted(set(triton) | set(ours)):
        if key not in ours:
            diffs.append(f"{key}: file missing from ours")
            continue
        if key not in triton:
            diffs.append(f"{key}: extra file in ours")
            continue
        t, o = triton[key], ours[key]
        where = f"{key}.proto"
        for attr in ("package", "syntax"):
            if getattr(t, attr) != getattr(o, attr):
                diffs.append(
                    f"{where}: {attr} {getattr(o, attr)!r} != Triton's {getattr(t, attr)!r}"
                )
        diffs += _compare_types(where, t, o, triton, ours)
        diffs += _compare_services(where, t, o)
    return diffs


def _all_messages(files: dict[str, FDP]) -> dict[str, MsgProto]:
    out: dict[str, MsgProto] = {}
    for fdp in files.values():
        out.update(_walk(fdp)[0])
    return out


def _all_names(files: dict[str, FDP]) -> set[str]:
    names: set[str] = set()
    for fdp in files.values():
        m, e = _walk(fdp)
        names |= set(m) | set(e)
    return names


def _compare_types(
    where: str, t: FDP, o: FDP, triton: dict[str, FDP], ours: dict[str, FDP]
) -> list[str]:
    diffs: list[str] = []
    t_msgs, t_enums = _walk(t)
    o_msgs, o_enums = _walk(o)
    t_all, o_all = _all_messages(triton), _all_messages(ours)
    t_known, o_known = _all_names(triton), _all_names(ours)

    for name in sorted(set(t_msgs) - set(o_msgs)):
        diffs.append(f"{where}: message {name} missing from ours")
    for name in sorted(set(o_msgs) - set(t_msgs)):
        diffs.append(f"{where}: extra message {name} in ours (Triton has none)")
    for name in sorted(set(t_enums) - set(o_enums)):
        diffs.append(f"{where}: enum {name} missing from ours")
    for name in sorted(set(o_enums) - set(t_enums)):
        diffs.append(f"{where}: extra enum {name} in ours (Triton has none)")

    for name in sorted(set(t_msgs) & set(o_msgs)):
        tm, om = t_msgs[name], o_msgs[name]
        if tm.options.map_entry != om.options.map_entry:
            diffs.append(
                f"{where}: message {name} map_entry {om.options.map_entry} "
                f"!= Triton's {tm.options.map_entry}"
            )
        t_oneofs = sorted(d.name for d in tm.oneof_decl)
        o_oneofs = sorted(d.name for d in om.oneof_decl)
        if t_oneofs != o_oneofs:
            diffs.append(f"{where}: message {name} oneofs {o_oneofs} != Triton's {t_oneofs}")

        t_fields = {f.name: f for f in tm.field}
        o_fields = {f.name: f for f in om.field}
        for fname in sorted(set(t_fields) - set(o_fields)):
            f = t_fields[fname]
            diffs.append(f"{where}: field {name}.{fname} (= {f.number}) missing from ours")
        for fname in sorted(set(o_fields) - set(t_fields)):
            f = o_fields[fname]
            diffs.append(f"{where}: extra field {name}.{fname} (= {f.number}) in ours")
        for fname in sorted(set(t_fields) & set(o_fields)):
            tf, of = t_fields[fname], o_fields[fname]
            if tf.number != of.number:
                diffs.append(
                    f"{where}: field {name}.{fname} number {of.number} != Triton's {tf.number}"
                )
            t_facts = _field_facts(tf, tm, name, t_all, t_known)
            o_facts = _field_facts(of, om, name, o_all, o_known)
            for fact in t_facts:
                if t_facts[fact] != o_facts[fact]:
                    diffs.append(
                        f"{where}: field {name}.{fname} {fact} {o_facts[fact]!r} "
                        f"!= Triton's {t_facts[fact]!r}"
                    )

    for name in sorted(set(t_enums) & set(o_enums)):
        tv = {v.name: v.number for v in t_enums[name].value}
        ov = {v.name: v.number for v in o_enums[name].value}
        for vname in sorted(set(tv) - set(ov)):
            diffs.append(f"{where}: enum value {name}.{vname} (= {tv[vname]}) missing from ours")
        for vname in sorted(set(ov) - set(tv)):
            diffs.append(f"{where}: extra enum value {name}.{vname} (= {ov[vname]}) in ours")
        for vname in sorted(set(tv) & set(ov)):
            if tv[vname] != ov[vname]:
                diffs.append(
                    f"{where}: enum value {name}.{vname} number {ov[vname]} != Triton's {tv[vname]}"
                )
    return diffs


def _compare_services(where: str, t: FDP, o: FDP) -> list[str]:
    diffs: list[str] = []
    t_svcs = {f"{t.package}.{s.name}": s for s in t.service}
    o_svcs = {f"{o.package}.{s.name}": s for s in o.service}
    for name in sorted(set(t_svcs) - set(o_svcs)):
        diffs.append(f"{where}: service {name} missing from ours")
    for name in sorted(set(o_svcs) - set(t_svcs)):
        diffs.append(f"{where}: extra service {name} in ours")
    for name in sorted(set(t_svcs) & set(o_svcs)):
        t_rpcs = {m.name: m for m in t_svcs[name].method}
        o_rpcs = {m.name: m for m in o_svcs[name].method}
        for rpc in sorted(set(t_rpcs) - set(o_rpcs)):
            diffs.append(f"{where}: rpc {name}.{rpc} missing from ours")
        for rpc in sorted(set(o_rpcs) - set(t_rpcs)):
            diffs.append(f"{where}: extra rpc {name}.{rpc} in ours (Triton has none)")
        for rpc in sorted(set(t_rpcs) & set(o_rpcs)):
            tm, om = t_rpcs[rpc], o_rpcs[rpc]
            for attr in ("input_type", "output_type", "client_streaming", "server_streaming"):
                tv, ov = getattr(tm, attr), getattr(om, attr)
                if isinstance(tv, str):
                    tv, ov = tv.lstrip("."), ov.lstrip(".")
                if tv != ov:
                    diffs.append(f"{where}: rpc {name}.{rpc} {attr} {ov!r} != Triton's {tv!r}")
    return diffs


def _report(diffs: list[str]) -> str:
    return f"{len(diffs)} difference(s) from Triton's protocol:\n  " + "\n  ".join(diffs)


# --------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def triton() -> dict[str, FDP]:
    return load_triton()


@pytest.fixture(scope="module")
def ours() -> dict[str, FDP]:
    return load_ours()


def test_descriptors_match_triton(triton: dict[str, FDP], ours: dict[str, FDP]) -> None:
    diffs = compare_files(triton, ours)
    assert not diffs, _report(diffs)


def test_comparator_reports_every_mutation(triton: dict[str, FDP], ours: dict[str, FDP]) -> None:
    """The comparator must catch (all of several) deliberate changes to our descriptor."""
    mutated = copy.deepcopy(ours)
    svc = mutated["grpc_service"]

    # 1. renumber a field.
    req = next(m for m in svc.message_type if m.name == "ModelInferRequest")
    raw = next(f for f in req.field if f.name == "raw_input_contents")
    raw.number = 17
    # 2. drop streaming from the bidi RPC.
    stream = next(r for r in svc.service[0].method if r.name == "ModelStreamInfer")
    stream.client_streaming = False
    # 3. an extra field Triton lacks.
    extra = req.field.add(name="shiny_new_field", number=99, json_name="shinyNewField")
    extra.type = FieldProto.TYPE_STRING
    extra.label = FieldProto.LABEL_OPTIONAL
    # 4. change an enum value number in the other file.
    dtype = next(e for e in mutated["model_config"].enum_type if e.name == "DataType")
    next(v for v in dtype.value if v.name == "TYPE_FP32").number = 42

    diffs = compare_files(triton, mutated)
    text = "\n".join(diffs)
    assert len(diffs) == 4, _report(diffs)
    assert "inference.ModelInferRequest.raw_input_contents number 17 != Triton's 7" in text
    assert "ModelStreamInfer client_streaming False != Triton's True" in text
    assert "extra field inference.ModelInferRequest.shiny_new_field" in text
    assert "inference.DataType.TYPE_FP32 number 42 != Triton's 11" in text

    # And the unmutated copy still compares clean (the mutation did not alias).
    assert compare_files(triton, ours) == []


def test_generated_code_is_fresh() -> None:
    """Committed protos/inference/*_pb2*.py must match what gen_protos.py produces."""
    probe = subprocess.run(
        [SERVICE_PYTHON, "-c", "import grpc_tools"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip("grpcio-tools not installed in the server interpreter")
    proc = subprocess.run(
        [SERVICE_PYTHON, str(REPO_ROOT / "scripts" / "gen_protos.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


if __name__ == "__main__":  # pragma: no cover - manual run
    sys.exit(pytest.main([__file__, "-v"]))
