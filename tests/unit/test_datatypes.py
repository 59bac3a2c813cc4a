"""wire.datatypes: the BYTES wire form and the config <-> v2 datatype names."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from inference import model_config_pb2 as mc
from wire import datatypes

ALL_V2 = [
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BF16",
    "BYTES",
]


def _prefixed(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


# --------------------------------------------------------------------------- BYTES wire form


def test_serialize_is_little_endian_length_prefixed() -> None:
    assert datatypes.serialize_bytes_tensor([b"ab", b"", b"xyz"]) == (
        b"\x02\x00\x00\x00ab" + b"\x00\x00\x00\x00" + b"\x03\x00\x00\x00xyz"
    )


def test_serialize_empty_sequence_is_empty_buffer() -> None:
    assert datatypes.serialize_bytes_tensor([]) == b""


@pytest.mark.parametrize(
    "items",
    [
        [b"hello", b"world"],
        [b"", b"", b""],
        [b"\x00\xff\xfe\x80binary\x00"],
        [bytes(range(256)), b"", b"x" * 70000],
    ],
    ids=["text", "empty-strings", "binary", "large-and-mixed"],
)
def test_bytes_round_trip(items: list[bytes]) -> None:
    buffer = datatypes.serialize_bytes_tensor(items)
    out = datatypes.deserialize_bytes_tensor(buffer, len(items))
    assert out.dtype == np.object_
    assert out.shape == (len(items),)
    assert list(out) == items
    assert all(type(item) is bytes for item in out)


def test_str_items_are_encoded_utf8() -> None:
    buffer = datatypes.serialize_bytes_tensor(["héllo", "", "日本"])
    assert buffer == _prefixed("héllo".encode(), b"", "日本".encode())
    out = datatypes.deserialize_bytes_tensor(buffer, 3)
    assert list(out) == ["héllo".encode(), b"", "日本".encode()]


def test_serialize_flattens_ndarray_in_c_order() -> None:
    array = np.array([[b"a", b"bb"], [b"ccc", b""]], dtype=np.object_)
    buffer = datatypes.serialize_bytes_tensor(array)
    assert buffer == _prefixed(b"a", b"bb", b"ccc", b"")
    assert list(datatypes.deserialize_bytes_tensor(buffer, 4)) == [b"a", b"bb", b"ccc", b""]


def test_deserialize_accepts_memoryview() -> None:
    buffer = _prefixed(b"one", b"two")
    out = datatypes.deserialize_bytes_tensor(memoryview(buffer), 2)
    assert list(out) == [b"one", b"two"]


def test_deserialize_empty_buffer_zero_elements() -> None:
    out = datatypes.deserialize_bytes_tensor(b"", 0)
    assert out.shape == (0,)
    assert out.dtype == np.object_


@pytest.mark.parametrize(
    ("buffer", "count", "message"),
    [
        (b"\x01\x00", 1, "truncated length prefix"),
        (_prefixed(b"ok") + b"\x05\x00\x00", 2, "truncated length prefix"),
        (b"\x05\x00\x00\x00abc", 1, "element runs past the end of the buffer"),
        (_prefixed(b"ok") + b"\xff\xff\xff\xff", 2, "element runs past the end of the buffer"),
        (_prefixed(b"a", b"b"), 3, "holds 2 elements, expected 3"),
        (_prefixed(b"a", b"b"), 1, "holds more than 1 elements"),
        (b"", 1, "holds 0 elements, expected 1"),
    ],
    ids=[
        "short-prefix",
        "short-second-prefix",
        "element-past-end",
        "huge-length",
        "too-few",
        "too-many",
        "empty-buffer",
    ],
)
def test_deserialize_malformed_raises_value_error(buffer: bytes, count: int, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        datatypes.deserialize_bytes_tensor(buffer, count)


# --------------------------------------------------------------------------- name mapping


@pytest.mark.parametrize(
    "config_name", [n for n in mc.DataType.DESCRIPTOR.values_by_name if n != "TYPE_INVALID"]
)
def test_every_config_type_maps_to_a_known_datatype_and_back(config_name: str) -> None:
    v2 = datatypes.datatype_from_config(config_name)
    assert v2 in datatypes.DATATYPES
    assert datatypes.config_type_for(v2) == config_name


@pytest.mark.parametrize("v2", ALL_V2)
def test_every_datatype_maps_to_a_config_type_and_back(v2: str) -> None:
    config_name = datatypes.config_type_for(v2)
    assert config_name in mc.DataType.DESCRIPTOR.values_by_name
    assert datatypes.datatype_from_config(config_name) == v2


@pytest.mark.parametrize(
    ("config_name", "v2"),
    [
        ("TYPE_STRING", "BYTES"),
        ("TYPE_BF16", "BF16"),
        ("TYPE_FP32", "FP32"),
        ("TYPE_BOOL", "BOOL"),
        ("TYPE_UINT64", "UINT64"),
    ],
)
def test_specific_names(config_name: str, v2: str) -> None:
    assert datatypes.datatype_from_config(config_name) == v2
    assert datatypes.config_type_for(v2) == config_name


def test_table_covers_exactly_the_v2_datatypes() -> None:
    assert sorted(datatypes.DATATYPES) == sorted(ALL_V2)
    assert datatypes.lookup("FP32") is datatypes.DATATYPES["FP32"]
    assert datatypes.lookup("FLOAT") is None


def test_table_storage() -> None:
    table = datatypes.DATATYPES
    assert table["BF16"].numpy == np.dtype(np.uint16)
    assert table["BF16"].itemsize == 2
    assert table["BF16"].contents_field is None
    assert table["FP16"].contents_field is None
    assert table["BYTES"].itemsize == 0
    assert table["BYTES"].numpy == np.dtype(np.object_)
    assert table["BYTES"].contents_field == "bytes_contents"
    assert table["INT64"].itemsize == 8
    assert table["BOOL"].itemsize == 1


def test_element_count() -> None:
    assert datatypes.element_count(()) == 1
    assert datatypes.element_count((2, 3, 4)) == 24
    assert datatypes.element_count((5, 0)) == 0
