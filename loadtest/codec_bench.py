"""Encode/decode micro-benchmark: upb-backed protobuf vs betterproto for ModelInferRequest.

Run from the repository root:

    .venv/bin/python loadtest/codec_bench.py [--repeat N]

It generates betterproto2 code from ``protos/inference/*.proto`` into a temporary
directory (nothing generated is written into the repository), builds the same
logical ``ModelInferRequest`` in both libraries, checks that both produce
byte-identical wire bytes and decode each other's bytes, then times, per message:

- ``encode``: ``msg.SerializeToString()`` of a pre-built message;
- ``decode``: ``Cls.FromString(wire)``;
- ``decode+read``: decode, then read the tensor name, datatype, shape and payload
  (``raw_input_contents[0]`` or the ``fp32_contents`` list), as a handler would.

Each figure is the best of ``--repeat`` timeit runs, in microseconds per operation.
The Markdown report goes to stdout and to ``loadtest/results/codec_bench.md``.

``--legacy-python PATH`` (repeatable) additionally runs the same cases under another
interpreter that has ``betterproto[compiler]==2.0.0b7`` and ``grpcio-tools`` (a throwaway
venv outside the repository); the script re-invokes itself there in ``--worker`` mode
and compares the SHA-256 of that library's wire bytes with upb's.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.metadata
import json
import os
import platform
import random
import re
import shlex
import struct
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = REPO_ROOT / "protos"
PROTO_FILES = ("inference/grpc_service.proto", "inference/model_config.proto")
DEFAULT_OUT = REPO_ROOT / "loadtest" / "results" / "codec_bench.md"
GEN_PACKAGE = "_codec_bench_gen"
OPS = ("encode", "decode", "decode+read")

MODEL_NAME = "bench_model"
REQUEST_ID = "req-0001"
TENSOR_NAME = "INPUT0"
# Multiples of 1/4 are exact in float32, so typed values survive a round trip unchanged.
FP32_VALUES = [i * 0.25 for i in range(16)]


@dataclass(frozen=True)
class Case:
    """One logical ModelInferRequest: a single FP32 input tensor."""

    key: str
    label: str
    shape: tuple[int, ...]
    raw: bytes | None  # payload for raw_input_contents, or None for typed contents
    typed: list[float] | None  # payload for contents.fp32_contents, or None for raw


def make_cases() -> list[Case]:
    big = random.Random(0).randbytes(1 << 20)
    return [
        Case("raw_1mib", "1 MiB raw FP32 [1,262144]", (1, 262144), big, None),
        Case(
            "raw_16",
            "16 FP32 raw [1,16]",
            (1, 16),
            struct.pack("<16f", *FP32_VALUES),
            None,
        ),
        Case("typed_16", "16 FP32 typed fp32_contents [1,16]", (1, 16), None, FP32_VALUES),
    ]


class Codec:
    """One library's way to build, encode, decode and read a ModelInferRequest."""

    name: str = ""
    request_cls: Any = None

    def build(self, case: Case) -> Any:
        raise NotImplementedError

    def encode(self, msg: Any) -> bytes:
        result: bytes = msg.SerializeToString()
        return result

    def decode(self, data: bytes) -> Any:
        return self.request_cls.FromString(data)

    def read(self, msg: Any, case: Case) -> object:
        tensor = msg.inputs[0]
        head = (tensor.name, tensor.datatype, list(tensor.shape))
        if case.raw is not None:
            return head, msg.raw_input_contents[0]
        return head, list(tensor.contents.fp32_contents)


class UpbCodec(Codec):
    def __init__(self) -> None:
        from inference import grpc_service_pb2

        self.pb = grpc_service_pb2
        self.request_cls = grpc_service_pb2.ModelInferRequest
        self.name = "upb protobuf"

    def build(self, case: Case) -> Any:
        pb = self.pb
        tensor = pb.ModelInferRequest.InferInputTensor(
            name=TENSOR_NAME, datatype="FP32", shape=list(case.shape)
        )
        if case.typed is not None:
            tensor.contents.fp32_contents.extend(case.typed)
        raw = [case.raw] if case.raw is not None else []
        return pb.ModelInferRequest(
            model_name=MODEL_NAME, id=REQUEST_ID, inputs=[tensor], raw_input_contents=raw
        )


class BetterprotoCodec(Codec):
    """Works for betterproto2 (0.10) and betterproto (2.0.0b7): same generated class names."""

    def __init__(self, module: ModuleType, name: str) -> None:
        self.mod = module
        self.request_cls = module.ModelInferRequest
        self.name = name

    def build(self, case: Case) -> Any:
        mod = self.mod
        # Leave `contents` unset for raw tensors: betterproto 2.0.0b7 fills unset message
        # fields with a default instance on decode, so an explicit None would not compare equal.
        extra = (
            {"contents": mod.InferTensorContents(fp32_contents=list(case.typed))}
            if case.typed is not None
            else {}
        )
        tensor = mod.ModelInferRequestInferInputTensor(
            name=TENSOR_NAME, datatype="FP32", shape=list(case.shape), **extra
        )
        raw = [case.raw] if case.raw is not None else []
        return self.request_cls(
            model_name=MODEL_NAME, id=REQUEST_ID, inputs=[tensor], raw_input_contents=raw
        )


def best_us(fn: Callable[[], object], repeat: int) -> float:
    """Best of `repeat` timeit runs, in microseconds per call."""
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e6


def time_codec(codec: Codec, case: Case, wire: bytes, repeat: int) -> dict[str, float]:
    msg = codec.build(case)
    expected_head = (TENSOR_NAME, "FP32", list(case.shape))
    expected = (expected_head, case.raw if case.raw is not None else case.typed)
    if codec.read(codec.decode(wire), case) != expected:
        raise AssertionError(f"{codec.name}: decoded {case.label} does not read back as built")
    return {
        "encode": best_us(lambda: codec.encode(msg), repeat),
        "decode": best_us(lambda: codec.decode(wire), repeat),
        "decode+read": best_us(lambda: codec.read(codec.decode(wire), case), repeat),
    }


# --- code generation -------------------------------------------------------------------


@dataclass(frozen=True)
class Flavor:
    dist: str  # distribution name of the runtime library
    compiler_dist: str  # distribution that ships the protoc plugin
    plugin: str  # protoc-gen-<plugin>
    label: str


BETTERPROTO2 = Flavor(
    "betterproto2", "betterproto2_compiler", "python_betterproto2", "betterproto2"
)
BETTERPROTO1 = Flavor("betterproto", "betterproto", "python_betterproto", "betterproto")


class CodegenError(RuntimeError):
    pass


def generate(flavor: Flavor, out_root: Path) -> ModuleType:
    """Run protoc with the flavor's plugin into out_root/GEN_PACKAGE and import the result."""
    bin_dir = Path(sys.executable).parent
    plugin = bin_dir / f"protoc-gen-{flavor.plugin}"
    if not plugin.exists():
        raise CodegenError(f"plugin {plugin} not found (is {flavor.compiler_dist} installed?)")
    pkg_dir = out_root / GEN_PACKAGE
    pkg_dir.mkdir(parents=True)
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"--{flavor.plugin}_out={pkg_dir}",
        *(str(PROTO_DIR / f) for f in PROTO_FILES),
    ]
    env = os.environ | {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise CodegenError(
            f"{shlex.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    (pkg_dir / "__init__.py").touch()
    sys.path.insert(0, str(out_root))
    try:
        return importlib.import_module(f"{GEN_PACKAGE}.inference")
    except Exception as exc:
        raise CodegenError(f"generated code failed to import: {exc!r}") from exc


def transport_note(module: ModuleType) -> str:
    """Which RPC library the generated stubs/servicer use (read from the generated source)."""
    source = Path(module.__file__ or "").read_text(encoding="utf-8")
    imports = sorted(set(re.findall(r"^(?:import|from) (grpclib|grpc)\b", source, re.MULTILINE)))
    classes = re.findall(r"^class (\w+(?:Stub|Base))\b(.*):$", source, re.MULTILINE)
    rpc = [f"`{name}{parent}`" for name, parent in classes]
    channel = re.search(r"def __init__\(self, channel: ([\w.]+)\)", source)
    return (
        f"top-level imports: {', '.join(imports) or 'no RPC library'}; "
        f"service classes: {', '.join(rpc) or 'none'}"
        + (f" (stub takes `channel: {channel.group(1)}`)" if channel else "")
    )


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# --- worker mode (another interpreter, e.g. betterproto 2.0.0b7) -------------------------


def run_worker(flavor_name: str, repeat: int) -> None:
    flavor = {"betterproto": BETTERPROTO1, "betterproto2": BETTERPROTO2}[flavor_name]
    extras: list[str] = []
    try:
        importlib.import_module("betterproto_rust_codec")
        extras.append(f"rust-codec {version('betterproto-rust-codec')}")
    except ImportError:
        pass
    label = f"{flavor.label} {version(flavor.dist)}" + (f" + {', '.join(extras)}" if extras else "")
    result: dict[str, Any] = {"label": label, "python": platform.python_version(), "cases": {}}
    with tempfile.TemporaryDirectory(prefix="codec_bench_") as tmp:
        try:
            module = generate(flavor, Path(tmp))
        except CodegenError as exc:
            result["error"] = str(exc)
            print(json.dumps(result))
            return
        codec = BetterprotoCodec(module, label)
        result["transport"] = transport_note(module)
        for case in make_cases():
            wire = codec.encode(codec.build(case))
            decoded = codec.decode(wire)
            roundtrip = decoded == codec.build(case) and codec.encode(decoded) == wire
            result["cases"][case.key] = {
                "sha256": hashlib.sha256(wire).hexdigest(),
                "roundtrip": roundtrip,
                "timings": time_codec(codec, case, wire, repeat),
            }
    print(json.dumps(result))


# --- main mode -----------------------------------------------------------------------


@dataclass
class Column:
    label: str
    timings: dict[str, dict[str, float]] = field(default_factory=dict)  # case -> op -> us


def check_wire(upb: UpbCodec, other: BetterprotoCodec, case: Case) -> tuple[bool, bool]:
    """(byte-identical, mutually decodable) for one case."""
    u_msg, o_msg = upb.build(case), other.build(case)
    u_wire, o_wire = upb.encode(u_msg), other.encode(o_msg)
    identical = u_wire == o_wire
    mutual = upb.decode(o_wire) == u_msg and other.decode(u_wire) == o_msg
    return identical, mutual


def fmt_us(value: float) -> str:
    return f"{value:.2f}" if value < 100 else f"{value:.1f}"


def render(
    args: argparse.Namespace,
    cases: Sequence[Case],
    sizes: dict[str, int],
    columns: Sequence[Column],
    checks: Sequence[tuple[str, str, str, str]],
    notes: Sequence[str],
) -> str:
    argv = [".venv/bin/python", "loadtest/codec_bench.py", *sys.argv[1:]]
    base = columns[0]
    lines = [
        "# codec_bench: upb protobuf vs betterproto, ModelInferRequest",
        "",
        f"Command: `{shlex.join(argv)}`",
        "",
        "Machine and libraries:",
        "",
        f"- nproc: {len(os.sched_getaffinity(0))} ({platform.machine()}, {platform.system()})",
        f"- python: {platform.python_version()} ({platform.python_implementation()})",
        f"- protobuf {version('protobuf')} (backend: {protobuf_backend()})",
        f"- betterproto2 {version('betterproto2')}, "
        f"betterproto2_compiler {version('betterproto2_compiler')}, "
        f"grpcio-tools {version('grpcio-tools')}",
        *[f"- {n}" for n in notes],
        "",
        f"Timings: best of {args.repeat} `timeit` runs (loop count from `autorange`, "
        "gc off), microseconds per operation. `encode` = `SerializeToString()` of a "
        "pre-built message; `decode` = `FromString(wire)`; `decode+read` = decode, then read "
        "the tensor name, datatype, shape and payload (`raw_input_contents[0]` or "
        "`list(contents.fp32_contents)`). Every message also carries "
        f'`model_name="{MODEL_NAME}"` and `id="{REQUEST_ID}"`.',
        "",
        "| message | wire bytes | op | "
        + " | ".join(f"{c.label} µs" for c in columns)
        + " | "
        + " | ".join(f"{c.label} ÷ upb" for c in columns[1:])
        + " |",
        "|" + "---|" * (3 + len(columns) + len(columns) - 1),
    ]
    for case in cases:
        for op in OPS:
            ref = base.timings[case.key][op]
            cells = [fmt_us(c.timings[case.key][op]) for c in columns]
            ratios = [f"{c.timings[case.key][op] / ref:.1f}x" for c in columns[1:]]
            lines.append(
                f"| {case.label} | {sizes[case.key]} | {op} | " + " | ".join(cells + ratios) + " |"
            )
    lines += [
        "",
        "Wire check against upb's bytes:",
        "",
        "| message | library | byte-identical | mutually decodable |",
        "|---|---|---|---|",
        *[f"| {a} | {b} | {c} | {d} |" for a, b, c, d in checks],
        "",
    ]
    return "\n".join(lines)


def protobuf_backend() -> str:
    from google.protobuf.internal import api_implementation

    return str(api_implementation.Type())


def run_main(args: argparse.Namespace) -> int:
    cases = make_cases()
    upb = UpbCodec()
    notes: list[str] = []
    checks: list[tuple[str, str, str, str]] = []
    wires = {c.key: upb.encode(upb.build(c)) for c in cases}
    sizes = {k: len(v) for k, v in wires.items()}
    columns = [Column(upb.name)]
    with tempfile.TemporaryDirectory(prefix="codec_bench_") as tmp:
        try:
            module = generate(BETTERPROTO2, Path(tmp))
        except CodegenError as exc:
            print(f"betterproto2 code generation failed: {exc}", file=sys.stderr)
            return 2
        bp2 = BetterprotoCodec(module, f"betterproto2 {version('betterproto2')}")
        notes.append(f"{bp2.name} generated with default options: {transport_note(module)}")
        columns.append(Column(bp2.name))
        ok = True
        for case in cases:
            identical, mutual = check_wire(upb, bp2, case)
            ok &= identical or mutual
            checks.append((case.label, bp2.name, yesno(identical), yesno(mutual)))
        if not ok:
            print("betterproto2 and upb disagree on the wire; see table", file=sys.stderr)
        for case in cases:
            for codec, col in ((upb, columns[0]), (bp2, columns[1])):
                print(f"timing {codec.name}: {case.label}", file=sys.stderr)
                col.timings[case.key] = time_codec(codec, case, wires[case.key], args.repeat)

    for python in args.legacy_python:
        print(f"timing under {python} (worker)", file=sys.stderr)
        proc = subprocess.run(
            [python, __file__, "--worker", "betterproto", "--repeat", str(args.repeat)],
            capture_output=True,
            text=True,
            check=False,
            cwd=REPO_ROOT,
        )
        if proc.returncode != 0:
            notes.append(f"worker {python} failed: {proc.stderr.strip()[-500:]}")
            continue
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        if "error" in res:
            notes.append(f"{res['label']} code generation failed: {res['error']}")
            continue
        notes.append(
            f"{res['label']} (python {res['python']}, separate venv via `{python}`): "
            f"{res['transport']}"
        )
        col = Column(res["label"])
        for case in cases:
            r = res["cases"][case.key]
            identical = r["sha256"] == hashlib.sha256(wires[case.key]).hexdigest()
            checks.append(
                (case.label, res["label"], yesno(identical), yesno(identical and r["roundtrip"]))
            )
            col.timings[case.key] = r["timings"]
        columns.append(col)

    report = render(args, cases, sizes, columns, checks, notes)
    print(report)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0 if ok else 1


def yesno(flag: bool) -> str:
    return "yes" if flag else "NO"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=5, help="timeit repeats (best is kept)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="Markdown report path (default: %(default)s)"
    )
    parser.add_argument(
        "--legacy-python",
        action="append",
        default=[],
        metavar="PATH",
        help="also time betterproto 2.0.0b7 under this interpreter (repeatable)",
    )
    parser.add_argument("--worker", choices=["betterproto", "betterproto2"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    if args.worker:
        run_worker(args.worker, args.repeat)
        return 0
    return run_main(args)


if __name__ == "__main__":
    sys.exit(main())
