"""StagingArea (files sent with a load request) and the response cache, directly."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from service.cache import ResponseCache, cache_key
from service.repository.staging import StagingArea, StagingError, StagingFailure
from service.types import OutputTensor

# --- StagingArea ------------------------------------------------------------------------------


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where StagingArea's mkdtemp goes: a folder this test can inspect in full."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if not p.is_dir())


def test_stage_writes_files_under_fresh_directories(temp_root: Path) -> None:
    area = StagingArea()
    files = {"1/model.onnx": b"one", "1/sub/extra.bin": b"\x00\x01", "2/model.onnx": b"two"}
    first = area.stage("mymodel", files)
    assert first.name == "mymodel"
    assert first.is_relative_to(temp_root)
    for name, data in files.items():
        assert (first / name).read_bytes() == data
    assert sorted(str(p.relative_to(first)) for p in all_files(first)) == sorted(files)

    second = area.stage("mymodel", {"3/model.onnx": b"three"})
    assert second.name == "mymodel"
    assert second != first
    assert not second.is_relative_to(first) and not first.is_relative_to(second)
    assert (second / "3" / "model.onnx").read_bytes() == b"three"
    # The earlier directory is untouched by the later stage.
    assert (first / "1" / "model.onnx").read_bytes() == b"one"
    assert not (first / "3").exists()
    area.cleanup()


# Names Triton's localize step fails on too (its poll fails: INTERNAL): StagingFailure.
FAILING_NAMES = [
    "../x",
    "../../x",
    "..",
    "1/../../x",
    "1/a/../../../x",
    "/../x",
    "1/" + "x" * 256,  # a part longer than NAME_MAX
    "x" * 256,
]

# Names only this server refuses (Triton would write them): StagingError.
BAD_NAMES = [
    "/abs/x",
    "/1/x",
    "1/../x",
    "x/model.onnx",  # version folder not numeric
    "-1/model.onnx",
    "1.0/model.onnx",
    "\u0663/model.onnx",  # ARABIC-INDIC DIGIT THREE: isdigit() but not a version
    "1",  # no file under the version
    "",
    ".",
    "1\\..\\x",
    "1/x\x00y",
    # Empty and '.' components: the module promises to refuse them ("must not contain '.'").
    "1/./x",
    "./1/x",
    "1//x",
]


@pytest.mark.parametrize(
    ("bad", "error"),
    [(n, StagingFailure) for n in FAILING_NAMES] + [(n, StagingError) for n in BAD_NAMES],
)
def test_invalid_name_refused_and_nothing_written(
    temp_root: Path, bad: str, error: type[Exception]
) -> None:
    area = StagingArea()
    with pytest.raises(error) as info:
        area.stage("m", {"1/model.onnx": b"valid", bad: b"evil"})
    assert type(info.value) is error
    assert f"'{bad}'" in str(info.value)  # names the file
    assert all_files(temp_root) == []
    assert not (temp_root.parent / "x").exists()
    area.cleanup()


@pytest.mark.parametrize("model", ["..", "../escaped", "a/../../escaped", "/ABSOLUTE"])
def test_invalid_model_name_refused_and_nothing_written(temp_root: Path, model: str) -> None:
    """The model name becomes a path component too: it must not lead out of the root."""
    outside = temp_root.parent / "outside"
    model = model.replace("/ABSOLUTE", str(outside))
    area = StagingArea()
    with pytest.raises(StagingError):
        area.stage(model, {"1/model.onnx": b"valid"})
    assert all_files(temp_root.parent) == []
    area.cleanup()


def test_staging_error_is_a_value_error() -> None:
    assert issubclass(StagingError, ValueError)  # the lifecycle maps ValueError to 400
    assert not issubclass(StagingFailure, ValueError)  # ... and this one to Triton's 500


def test_conflicting_names_refused_and_nothing_written(temp_root: Path) -> None:
    """'1/a' as a file and as a folder: unusable as a set, so refused before any write
    (Triton's localize step fails on the second of them)."""
    area = StagingArea()
    with pytest.raises(StagingFailure):
        area.stage("m", {"1/a": b"file", "1/a/b": b"under it"})
    assert all_files(temp_root) == []
    area.cleanup()


def test_exclusive_create_never_follows_or_replaces_a_symlink(tmp_path: Path) -> None:
    """The primitive StagingArea writes with: open(..., 'xb') refuses existing entries,
    symlinks included (a symlink cannot be planted through the API: each stage is a fresh
    directory, and names are checked first)."""
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"precious")
    link = tmp_path / "link"
    link.symlink_to(outside)
    with pytest.raises(FileExistsError), open(link, "xb") as out:
        out.write(b"overwritten")
    assert outside.read_bytes() == b"precious"

    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "would_be_created")
    with pytest.raises(FileExistsError), open(dangling, "xb") as out:
        out.write(b"x")
    assert not (tmp_path / "would_be_created").exists()


def test_staged_directories_do_not_collide_with_existing_entries(temp_root: Path) -> None:
    area = StagingArea()
    first = area.stage("m", {"1/model.onnx": b"a"})
    # Something else appears beside the staged model: the next stage does not touch it.
    (first.parent / "other").write_bytes(b"keep")
    second = area.stage("m", {"1/model.onnx": b"b"})
    assert (first.parent / "other").read_bytes() == b"keep"
    assert (second / "1" / "model.onnx").read_bytes() == b"b"
    area.cleanup()


def test_cleanup_removes_the_root(temp_root: Path) -> None:
    area = StagingArea()
    area.cleanup()  # nothing staged yet: a no-op
    staged = area.stage("m", {"1/model.onnx": b"a"})
    assert staged.exists()
    area.cleanup()
    assert not staged.exists()
    assert list(temp_root.iterdir()) == []
    area.cleanup()  # twice is fine
    again = area.stage("m", {"1/model.onnx": b"b"})  # usable after cleanup
    assert (again / "1" / "model.onnx").read_bytes() == b"b"
    area.cleanup()
    assert list(temp_root.iterdir()) == []


def test_refused_stage_creates_no_root(temp_root: Path) -> None:
    area = StagingArea()
    with pytest.raises(StagingFailure):
        area.stage("m", {"../x": b"x"})
    with pytest.raises(StagingError):
        area.stage("m", {"1/./x": b"x"})
    assert list(temp_root.iterdir()) == []


# --- ResponseCache ----------------------------------------------------------------------------

KEY_BYTES = 32  # blake2b digest size: part of every entry's size


def outputs(value: float, n: int = 4) -> list[OutputTensor]:
    """One FP32 output of n elements: 4n bytes."""
    return [OutputTensor("OUT", "FP32", np.full(n, value, dtype=np.float32))]


def key(i: int) -> bytes:
    return cache_key("m", 1, {"X": np.array([i], dtype=np.int64)}, ["OUT"])


def test_get_and_put() -> None:
    cache = ResponseCache(1024)
    assert cache.get(key(1)) is None
    assert cache.put(key(1), outputs(1.0))
    got = cache.get(key(1))
    assert got is not None
    assert [o.name for o in got] == ["OUT"] and got[0].datatype == "FP32"
    np.testing.assert_array_equal(got[0].array, np.full(4, 1.0, dtype=np.float32))
    assert len(cache) == 1
    assert cache.used == 16 + KEY_BYTES
    assert cache.get(key(2)) is None


def test_put_same_key_replaces_without_double_counting() -> None:
    cache = ResponseCache(1024)
    cache.put(key(1), outputs(1.0))
    cache.put(key(1), outputs(2.0, n=8))
    assert len(cache) == 1
    assert cache.used == 32 + KEY_BYTES
    got = cache.get(key(1))
    assert got is not None
    np.testing.assert_array_equal(got[0].array, np.full(8, 2.0, dtype=np.float32))


def test_byte_budget_evicts_least_recently_used() -> None:
    entry = 16 + KEY_BYTES
    cache = ResponseCache(3 * entry)  # room for exactly three entries
    for i in (1, 2, 3):
        assert cache.put(key(i), outputs(float(i)))
    assert cache.used == 3 * entry
    assert cache.get(key(1)) is not None  # 1 becomes the most recently used
    assert cache.put(key(4), outputs(4.0))  # evicts 2, the least recently used
    assert cache.get(key(2)) is None
    assert all(cache.get(key(i)) is not None for i in (1, 3, 4))
    assert cache.used == 3 * entry and len(cache) == 3

    # A larger entry evicts as many old ones as it needs, oldest first (1, then 3).
    assert cache.put(key(5), outputs(5.0, n=4 + 12))  # 2 entries' worth of bytes
    assert len(cache) == 1 + 1 and cache.get(key(4)) is not None
    assert cache.get(key(1)) is None and cache.get(key(3)) is None
    assert cache.used <= cache.capacity


def test_oversize_entry_refused_and_nothing_evicted() -> None:
    cache = ResponseCache(100)
    assert cache.put(key(1), outputs(1.0))
    assert not cache.put(key(2), outputs(2.0, n=20))  # 80 + 32 > 100
    assert cache.get(key(2)) is None
    assert cache.get(key(1)) is not None
    assert cache.used == 16 + KEY_BYTES
    # Exactly the budget fits.
    assert ResponseCache(16 + KEY_BYTES).put(key(3), outputs(3.0))
    assert not ResponseCache(16 + KEY_BYTES - 1).put(key(3), outputs(3.0))


def test_stored_copies_are_independent() -> None:
    cache = ResponseCache(1024)
    original = outputs(1.0)
    cache.put(key(1), original)
    original[0].array[:] = 99.0
    original.append(OutputTensor("EXTRA", "FP32", np.zeros(1, dtype=np.float32)))
    got = cache.get(key(1))
    assert got is not None
    assert [o.name for o in got] == ["OUT"]
    np.testing.assert_array_equal(got[0].array, np.full(4, 1.0, dtype=np.float32))
    assert not np.shares_memory(got[0].array, original[0].array)


def test_bytes_outputs_sized_by_their_contents() -> None:
    cache = ResponseCache(1024)
    text = np.empty(2, dtype=np.object_)
    text[:] = [b"hello", b"abc"]
    assert cache.put(key(1), [OutputTensor("T", "BYTES", text)])
    assert cache.used == 8 + KEY_BYTES
    got = cache.get(key(1))
    assert got is not None and list(got[0].array) == [b"hello", b"abc"]


# --- cache_key --------------------------------------------------------------------------------


def k(
    model: str = "m",
    version: int = 1,
    inputs: dict[str, np.ndarray] | None = None,
    outs: tuple[str, ...] = ("OUT",),
) -> bytes:
    if inputs is None:
        inputs = {"X": np.arange(6, dtype=np.float32).reshape(2, 3)}
    return cache_key(model, version, inputs, list(outs))


def test_key_equal_for_equal_content() -> None:
    assert k() == k()
    assert len(k()) == 32
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    # Another array object, and a non-contiguous view with the same values.
    assert k(inputs={"X": base.copy()}) == k()
    fortran = np.asfortranarray(base)
    assert not fortran.flags.c_contiguous
    assert k(inputs={"X": fortran}) == k()
    # The order inputs are given in does not matter.
    two = {"A": base, "B": base + 1}
    assert k(inputs=two) == k(inputs={"B": base + 1, "A": base})


def test_key_differs_for_every_part() -> None:
    base = np.arange(6, dtype=np.float32).reshape(2, 3)
    variants = {
        "base": k(),
        "model": k(model="other"),
        "version": k(version=2),
        "input name": k(inputs={"Y": base}),
        "dtype": k(inputs={"X": base.view(np.int32)}),  # same bytes, other dtype
        "shape": k(inputs={"X": base.reshape(3, 2)}),  # same bytes, other shape
        "bytes": k(inputs={"X": base + 1}),
        "outputs": k(outs=("OTHER",)),
        "output set": k(outs=("OUT", "OTHER")),
        "no outputs": k(outs=()),
        "extra input": k(inputs={"X": base, "Z": base}),
    }
    assert len(set(variants.values())) == len(variants), variants


def test_key_hashes_bytes_tensors() -> None:
    def text(*items: bytes) -> np.ndarray:
        out = np.empty(len(items), dtype=np.object_)
        out[:] = list(items)
        return out

    one = k(inputs={"T": text(b"ab", b"c")})
    assert one == k(inputs={"T": text(b"ab", b"c")})
    assert one != k(inputs={"T": text(b"a", b"bc")})  # same concatenation, other elements
    assert one != k(inputs={"T": text(b"ab", b"d")})
    assert one != k(inputs={"T": text(b"ab")})
    assert k(inputs={"T": text(b"")}) != k(inputs={"T": text()})
