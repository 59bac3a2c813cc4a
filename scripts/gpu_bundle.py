"""Pack onnxruntime-gpu small enough to carry to a GPU machine without network, and unpack it there.

Why this exists: the onnxruntime-gpu wheel (CUDA 13) is 255 MB, and the GPU machine lent to this
project takes files in batches of at most 64 MiB, for minutes at a time. 218 MB of the wheel is the
CUDA provider's device code (its ``.nv_fatbin`` section): one compiled image of every kernel per
GPU architecture (sm_75, 80, 86, 89, 90, 120). A GPU runs only the image of its own architecture,
so ``pack`` keeps the images of the architectures asked for (``--sm 90`` for the H100/H200) and
drops the others. Each fat binary keeps its place and its start address (the host code registers
fat binaries by address); its kept entries move up and the bytes freed at its end become zeros,
which xz reduces to almost nothing. The section's size, and so every other address in the library,
is unchanged. Nothing else of the wheel is touched.

``pack WHEEL OUT_DIR`` writes ``OUT_DIR/part.0``, ``part.1``, ...: one xz-compressed tar of the
wheel's files (the pruned provider in place of the original), cut into parts of ``--part-mb`` MiB,
with ``NAME`` (the wheel's file name) and ``SHA256`` (of the joined parts). ``unpack OUT_DIR
TARGET`` joins and checks them and extracts the package into ``TARGET`` with Python's standard
library alone (the GPU machine's image has no zstd module and no network), ready for
``PYTHONPATH=TARGET``.

Fat binary layout (as the CUDA toolchain writes it; every field little-endian): a header of 16
bytes (magic ``0xBA55ED50``, u16 version, u16 header size, u64 size of the entries that follow),
then entries, each a header (u16 kind: 1 PTX, 2 ELF; u16 version; u32 header size; u64 padded
payload size; ...; u32 architecture at byte 28) and its payload.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import lzma
import os
import struct
import sys
import tarfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
FATBIN_HEADER = struct.Struct("<IHHQ")
ENTRY_PREFIX = struct.Struct("<HHIQ")
ENTRY_ARCH_OFFSET = 28
CUDA_PROVIDER = "onnxruntime/capi/libonnxruntime_providers_cuda.so"


def elf_section(data: bytes | bytearray, name: str) -> tuple[int, int]:
    """Return (file offset, size) of the named section of a 64-bit little-endian ELF file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    str_off = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)[0]
    for index in range(shnum):
        header = shoff + index * shentsize
        name_off = struct.unpack_from("<I", data, header)[0]
        start = str_off + name_off
        section_name = bytes(data[start : data.index(b"\0", start)]).decode()
        if section_name == name:
            offset, size = struct.unpack_from("<QQ", data, header + 0x18)
            return offset, size
    raise ValueError(f"no section {name!r}")


def prune_fatbin_section(section: bytearray, keep_archs: Iterable[int]) -> dict[int, int]:
    """Keep only the entries of ``keep_archs`` in every fat binary of ``section``, in place.

    Returns the bytes per architecture that were dropped. A fat binary with no entry for
    ``keep_archs`` is left whole. Raises ValueError when the section does not parse as a run of
    fat binaries.
    """
    keep = set(keep_archs)
    dropped: dict[int, int] = {}
    pos = 0
    while pos + FATBIN_HEADER.size <= len(section):
        magic, _version, header_size, entries_size = FATBIN_HEADER.unpack_from(section, pos)
        if magic != FATBIN_MAGIC:
            if any(section[pos : pos + 8]):
                raise ValueError(f"unexpected bytes at fat binary offset {pos:#x}")
            pos += 8  # alignment padding between fat binaries
            continue
        start = pos + header_size
        end = start + entries_size
        if end > len(section):
            raise ValueError(f"fat binary at {pos:#x} runs past its section")
        kept: list[bytes] = []
        dropped_here: dict[int, int] = {}
        entry = start
        while entry < end:
            _kind, _ev, entry_header, payload = ENTRY_PREFIX.unpack_from(section, entry)
            arch = struct.unpack_from("<I", section, entry + ENTRY_ARCH_OFFSET)[0]
            whole = entry_header + payload
            if arch in keep:
                kept.append(bytes(section[entry : entry + whole]))
            else:
                dropped_here[arch] = dropped_here.get(arch, 0) + whole
            entry += whole
        if entry != end:
            raise ValueError(f"fat binary at {pos:#x}: entries do not fill its size")
        if not kept:
            # No image for the kept architectures (kernels built only for others): those GPUs
            # could not run it anyway; leave it whole rather than register an empty fat binary.
            pos = end
            continue
        for arch, size in dropped_here.items():
            dropped[arch] = dropped.get(arch, 0) + size
        body = b"".join(kept)
        section[start : start + len(body)] = body
        section[start + len(body) : end] = bytes(end - start - len(body))
        struct.pack_into("<Q", section, pos + 8, len(body))
        pos = end
    return dropped


def prune_library(data: bytes, keep_archs: Iterable[int]) -> tuple[bytes, dict[int, int]]:
    """Return the library with its ``.nv_fatbin`` pruned to ``keep_archs``, and what was dropped."""
    image = bytearray(data)
    offset, size = elf_section(image, ".nv_fatbin")
    section = bytearray(image[offset : offset + size])
    dropped = prune_fatbin_section(section, keep_archs)
    image[offset : offset + size] = section
    return bytes(image), dropped


def pack(wheel: Path, out_dir: Path, keep_archs: list[int], part_mb: int) -> list[Path]:
    """Write the pruned package of ``wheel`` as xz parts into ``out_dir``; return the parts."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("part.*"):
        old.unlink()
    buffer = io.BytesIO()
    with zipfile.ZipFile(wheel) as archive, tarfile.open(fileobj=buffer, mode="w") as tar:
        for info in archive.infolist():
            if info.is_dir():
                continue
            data = archive.read(info)
            if info.filename == CUDA_PROVIDER:
                data, dropped = prune_library(data, keep_archs)
                for arch, size in sorted(dropped.items()):
                    print(f"gpu_bundle: dropped sm_{arch}: {size / 1e6:.1f} MB", file=sys.stderr)
            member = tarfile.TarInfo(info.filename)
            member.size = len(data)
            shared_library = info.filename.endswith(".so") or ".so." in info.filename
            member.mode = 0o755 if shared_library else 0o644
            tar.addfile(member, io.BytesIO(data))
    packed = lzma.compress(buffer.getvalue(), preset=9 | lzma.PRESET_EXTREME)
    part_size = part_mb * 1024 * 1024
    parts = []
    for index in range(0, len(packed), part_size):
        part = out_dir / f"part.{index // part_size}"
        part.write_bytes(packed[index : index + part_size])
        parts.append(part)
    (out_dir / "SHA256").write_text(hashlib.sha256(packed).hexdigest() + "\n")
    (out_dir / "NAME").write_text(wheel.name + "\n")
    return parts


def unpack(parts_dir: Path, target: Path) -> None:
    """Join the parts in ``parts_dir``, check their hash and extract the package into ``target``."""
    parts = sorted(parts_dir.glob("part.*"), key=lambda p: int(p.suffix[1:]))
    if not parts:
        raise SystemExit(f"gpu_bundle: no part.* in {parts_dir}")
    packed = b"".join(p.read_bytes() for p in parts)
    expected = (parts_dir / "SHA256").read_text().strip()
    if hashlib.sha256(packed).hexdigest() != expected:
        raise SystemExit(f"gpu_bundle: {len(parts)} parts in {parts_dir} do not match SHA256")
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(packed)), mode="r") as tar:
        tar.extractall(target, filter="data")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_pack = sub.add_parser("pack", help="prune, compress and split a wheel")
    p_pack.add_argument("wheel", type=Path)
    p_pack.add_argument("out_dir", type=Path)
    p_pack.add_argument("--sm", type=int, action="append", help="architecture to keep (90)")
    p_pack.add_argument("--part-mb", type=int, default=60)
    p_unpack = sub.add_parser("unpack", help="join, check and extract the parts")
    p_unpack.add_argument("parts_dir", type=Path)
    p_unpack.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    if args.command == "pack":
        parts = pack(args.wheel, args.out_dir, args.sm or [90], args.part_mb)
        for part in parts:
            print(f"{part} {os.path.getsize(part) / 2**20:.1f} MiB")
    else:
        unpack(args.parts_dir, args.target)
        print(f"gpu_bundle: unpacked into {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
