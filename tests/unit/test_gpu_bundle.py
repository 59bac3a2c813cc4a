"""scripts/gpu_bundle.py: fat binaries pruned to the kept architectures in place, the pack and
unpack round trip, and (where scripts/gpu_wheels.sh has built the parts and a Python of the
wheel's version is here) onnxruntime imported from the unpacked folder."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_bundle", ROOT / "scripts" / "gpu_bundle.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_bundle"] = module
    spec.loader.exec_module(module)
    return module


gpu_bundle = _load()


def _entry(arch: int, payload: bytes) -> bytes:
    """An ELF entry: 64-byte header (kind 2, header size, payload size, arch at byte 28)."""
    header = bytearray(64)
    struct.pack_into("<HHIQ", header, 0, 2, 0x101, 64, len(payload))
    struct.pack_into("<I", header, 28, arch)
    return bytes(header) + payload


def _fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", gpu_bundle.FATBIN_MAGIC, 1, 16, len(body)) + body


def _entries(section: bytes | bytearray, at: int) -> list[tuple[int, bytes]]:
    _magic, _version, header, size = struct.unpack_from("<IHHQ", section, at)
    out, pos = [], at + header
    while pos < at + header + size:
        _kind, _ev, entry_header, payload = struct.unpack_from("<HHIQ", section, pos)
        arch = struct.unpack_from("<I", section, pos + 28)[0]
        start = pos + entry_header
        out.append((arch, bytes(section[start : start + payload])))
        pos = start + payload
    return out


def test_fat_binaries_keep_their_place_and_only_the_kept_architectures() -> None:
    first = _fatbin(_entry(80, b"a" * 24), _entry(90, b"B" * 16), _entry(120, b"c" * 8))
    only_other = _fatbin(_entry(120, b"d" * 8))
    second = _fatbin(_entry(90, b"E" * 8), _entry(75, b"f" * 32))
    section = bytearray(first + bytes(8) + only_other + second)
    starts = [0, len(first) + 8, len(first) + 8 + len(only_other)]
    size = len(section)

    dropped = gpu_bundle.prune_fatbin_section(section, [90])

    assert len(section) == size  # every address after the section is unchanged
    assert _entries(section, starts[0]) == [(90, b"B" * 16)]
    assert _entries(section, starts[1]) == [(120, b"d" * 8)]  # nothing for sm_90: left whole
    assert _entries(section, starts[2]) == [(90, b"E" * 8)]
    assert not any(section[starts[0] + 16 + 64 + 16 : starts[1]])  # the freed bytes are zeros
    assert dropped == {80: 64 + 24, 120: 64 + 8, 75: 64 + 32}


def test_a_section_that_is_not_fat_binaries_is_refused() -> None:
    with pytest.raises(ValueError, match="unexpected bytes"):
        gpu_bundle.prune_fatbin_section(bytearray(b"\x01" * 32), [90])
    truncated = bytearray(_fatbin(_entry(90, b"x" * 8))[:-4])
    with pytest.raises(ValueError, match="runs past its section"):
        gpu_bundle.prune_fatbin_section(truncated, [90])


def test_pack_and_unpack_round_trip(tmp_path: Path) -> None:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("demo/__init__.py", "VALUE = 42\n")
        archive.writestr("demo/data.bin", os.urandom(3000))
    parts = gpu_bundle.pack(wheel, tmp_path / "parts", [90], part_mb=1)
    assert [p.name for p in parts] == ["part.0"]
    gpu_bundle.unpack(tmp_path / "parts", tmp_path / "site")
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            assert (tmp_path / "site" / name).read_bytes() == archive.read(name)
    (tmp_path / "parts" / "part.0").write_bytes(b"tampered")
    with pytest.raises(SystemExit, match="do not match SHA256"):
        gpu_bundle.unpack(tmp_path / "parts", tmp_path / "again")


def _bundle_python() -> tuple[Path, str] | None:
    """The parts scripts/gpu_wheels.sh left in .whl-ort, and a Python of the wheel's version."""
    parts = ROOT / ".whl-ort"
    if not (parts / "NAME").is_file():
        return None
    tag = re.search(r"-cp(\d)(\d+)-", (parts / "NAME").read_text())
    if tag is None:
        return None
    python = os.environ.get("GPU_BUNDLE_PYTHON") or shutil.which(f"python{tag[1]}.{tag[2]}")
    if python is None or subprocess.run([python, "-c", ""], capture_output=True).returncode:
        return None  # none, or a stand-in that does not run (a version manager's shim)
    return parts, python


def test_bundle_unpacks_into_an_importable_onnxruntime(tmp_path: Path) -> None:
    """Runs where the 66 MiB of parts were built (not in CI): the round trip of the real one."""
    found = _bundle_python()
    if found is None:
        pytest.skip("no .whl-ort parts with a Python of their version (scripts/gpu_wheels.sh)")
    parts, python = found
    gpu_bundle.unpack(parts, tmp_path / "site")
    # GPU_BUNDLE_PYTHONPATH: where that Python finds numpy, if not in its own site-packages.
    extra = os.environ.get("GPU_BUNDLE_PYTHONPATH", "")
    code = "import onnxruntime as o; print(o.__version__, o.get_available_providers())"
    probe = subprocess.run(
        [python, "-c", code],
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "site"), extra])),
        },
        capture_output=True,
        text=True,
    )
    if "No module named 'numpy'" in probe.stderr:
        pytest.skip(f"{python} has no numpy (set GPU_BUNDLE_PYTHONPATH)")
    assert probe.returncode == 0, probe.stderr
    version = (parts / "NAME").read_text().split("-")[1]
    assert probe.stdout.startswith(version), probe.stdout
    assert "CUDAExecutionProvider" in probe.stdout, probe.stdout
