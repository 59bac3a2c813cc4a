"""The response cache: an LRU of model outputs keyed by a hash of the request's inputs.

The key covers the model name and version, every input's name, datatype, shape and bytes,
and the requested output names, so two requests share an entry only when the model would
compute the same outputs for them. Entries are evicted least-recently-used to stay within
the byte budget given by ``--cache-config local,size=BYTES``.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from wire import datatypes

from .types import OutputTensor

__all__ = ["HASH_INLINE_BYTES", "ResponseCache", "cache_key", "small_key"]

#: Inputs up to this many bytes in all are hashed where the request is (a frontend's or
#: the engine's loop); larger ones are hashed by the engine in a thread (never block).
HASH_INLINE_BYTES = 64 * 1024


def _tensor_bytes(array: npt.NDArray[Any]) -> bytes | memoryview:
    if array.dtype == np.object_:
        return datatypes.serialize_bytes_tensor(array)
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).data


def cache_key(
    model: str, version: int, inputs: Mapping[str, npt.NDArray[Any]], outputs: Sequence[str]
) -> bytes:
    digest = hashlib.blake2b(digest_size=32)
    digest.update(f"{model}\0{version}\0".encode())
    for name in sorted(inputs):
        array = inputs[name]
        digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        digest.update(_tensor_bytes(array))
    digest.update("\0".join(outputs).encode())
    return digest.digest()


def small_key(
    model: str, version: int, inputs: Mapping[str, npt.NDArray[Any]], outputs: Sequence[str]
) -> bytes | None:
    """``cache_key`` for inputs of at most ``HASH_INLINE_BYTES``; None for larger ones."""
    if sum(a.nbytes for a in inputs.values()) > HASH_INLINE_BYTES:
        return None
    return cache_key(model, version, inputs, outputs)


def _size(outputs: Iterable[OutputTensor]) -> int:
    total = 0
    for out in outputs:
        if out.array.dtype == np.object_:
            total += sum(len(x) if isinstance(x, bytes | str) else 8 for x in out.array.flat)
        else:
            total += out.array.nbytes
    return total


class ResponseCache:
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.used = 0
        self._entries: OrderedDict[bytes, tuple[list[OutputTensor], int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> list[OutputTensor] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: bytes, outputs: list[OutputTensor]) -> bool:
        """Store a copy of ``outputs``; False when it alone exceeds the whole budget."""
        size = _size(outputs) + len(key)
        if size > self.capacity:
            return False
        if key in self._entries:
            self.used -= self._entries.pop(key)[1]
        while self.used + size > self.capacity:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.used -= evicted
        stored = [OutputTensor(o.name, o.datatype, o.array.copy()) for o in outputs]
        self._entries[key] = (stored, size)
        self.used += size
        return True
