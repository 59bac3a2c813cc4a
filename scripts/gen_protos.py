"""Generate the Python protobuf/gRPC modules for protos/{inference,trtis}/*.proto.

Usage (from anywhere):
    .venv/bin/python scripts/gen_protos.py          # regenerate in place
    .venv/bin/python scripts/gen_protos.py --check  # exit 1 if committed code is stale

The generated modules are committed beside their sources (protos/inference/,
protos/trtis/) and import as packages ``inference`` (KServe v2) and ``trtis`` (the
legacy v1 API, proto package nvidia.inferenceserver). ``--check`` generates into a temporary
directory and compares byte for byte with the committed files.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "protos"
PACKAGES = ("inference", "trtis")
PROTO_FILES = (
    "inference/api_group.proto",
    "inference/http_route.proto",
    "inference/model_config.proto",
    "inference/grpc_service.proto",
    "trtis/request_status.proto",
    "trtis/api.proto",
    "trtis/model_config.proto",
    "trtis/server_status.proto",
    "trtis/grpc_service.proto",
)
INIT_TEXT = '"""Generated code package: modules built from the .proto files beside them."""\n'


def generated_names() -> list[str]:
    """Paths (relative to protos/) of every file this script writes."""
    names = [f"{package}/__init__.py" for package in PACKAGES]
    for proto in PROTO_FILES:
        stem = proto.removesuffix(".proto")
        names += [f"{stem}_pb2.py", f"{stem}_pb2.pyi", f"{stem}_pb2_grpc.py"]
    return names


def generate(out_dir: Path) -> None:
    """Run protoc (from grpc_tools, in this interpreter) writing into out_dir."""
    try:
        import grpc_tools  # type: ignore[import-untyped]
        from grpc_tools import protoc
    except ImportError:
        sys.exit("grpcio-tools is not installed in this interpreter (install the 'dev' extra)")

    # The well-known .proto files ship inside grpc_tools; protoc needs them on -I.
    wkt_include = Path(grpc_tools.__file__).resolve().parent / "_proto"
    for package in PACKAGES:
        (out_dir / package).mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{wkt_include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(PROTO_ROOT / p) for p in PROTO_FILES),
    ]
    rc = protoc.main(args)
    if rc != 0:
        sys.exit(f"protoc failed with exit status {rc}")
    for package in PACKAGES:
        (out_dir / package / "__init__.py").write_text(INIT_TEXT, encoding="utf-8")


def stale_files() -> list[str]:
    """Generate into a temp dir; return files that are missing or differ."""
    with tempfile.TemporaryDirectory(prefix="gen_protos_") as tmp:
        tmp_dir = Path(tmp)
        generate(tmp_dir)
        stale = []
        for name in generated_names():
            fresh, committed = tmp_dir / name, PROTO_ROOT / name
            if not committed.is_file() or not filecmp.cmp(fresh, committed, shallow=False):
                stale.append(f"protos/{name}")
        return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 listing generated files that are stale or missing",
    )
    opts = parser.parse_args(argv)

    if opts.check:
        stale = stale_files()
        if stale:
            print("Generated protobuf code is stale; run scripts/gen_protos.py:", file=sys.stderr)
            for name in stale:
                print(f"  {name}", file=sys.stderr)
            return 1
        print("Generated protobuf code is up to date.")
        return 0

    with tempfile.TemporaryDirectory(prefix="gen_protos_") as tmp:
        tmp_dir = Path(tmp)
        generate(tmp_dir)
        for name in generated_names():
            shutil.copyfile(tmp_dir / name, PROTO_ROOT / name)
            print(f"wrote protos/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
