"""The order in which Triton walks a request's inputs, for reporting errors as it does.

Triton keeps a request's inputs in a ``std::unordered_map<std::string, Input>`` and checks
them (and lists them in "Got input(s) [...]") in that map's iteration order, which with
libstdc++ depends on each name's ``std::hash`` and on the bucket count. When a request has
several faulty inputs, Triton reports the first faulty one in *that* order; so does this
server. Only the error path computes it: valid requests never pay for it.

What is reproduced (checked against g++'s own map on thousands of random name sets):
``std::_Hash_bytes`` (64-bit MurmurHash variant, seed 0xc70f6907), the prime rehash
policy's bucket counts, and the singly linked node list that insertion and rehashing
maintain (a node joins the front of its bucket's run, or the list head for a new bucket).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["std_hash", "unordered_order"]

_MASK = (1 << 64) - 1
_MUL = (0xC6A4A793 << 32) + 0x5BD1E995
_SEED = 0xC70F6907
# Bucket counts libstdc++ moves through as a map grows (its max load factor is 1.0).
_BUCKETS = (13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933)


def _shift_mix(value: int) -> int:
    return value ^ (value >> 47)


def std_hash(data: bytes) -> int:
    """``std::hash<std::string>`` of libstdc++ on a 64-bit platform."""
    size = len(data)
    aligned = size & ~7
    digest = (_SEED ^ (size * _MUL)) & _MASK
    for i in range(0, aligned, 8):
        word = int.from_bytes(data[i : i + 8], "little")
        digest ^= (_shift_mix((word * _MUL) & _MASK) * _MUL) & _MASK
        digest = (digest * _MUL) & _MASK
    if size & 7:
        digest ^= int.from_bytes(data[aligned:], "little")
        digest = (digest * _MUL) & _MASK
    digest = (_shift_mix(digest) * _MUL) & _MASK
    return _shift_mix(digest)


# Beyond this many names the exact order costs more than an error path should.
EXACT_LIMIT = 1024


class _Map:
    """The node list as runs of equal buckets: the list is ``runs`` in order, each run's
    nodes front-first (stored reversed, so that joining the front is an append)."""

    def __init__(self, buckets: int) -> None:
        self.buckets = buckets
        self.runs: dict[int, list[str]] = {}  # insertion order of keys = reverse run order

    def place(self, name: str, digest: int) -> None:
        bucket = digest % self.buckets
        run = self.runs.get(bucket)
        if run is None:
            self.runs[bucket] = [name]  # a new run goes to the list head
        else:
            run.append(name)  # joins the front of its bucket's run

    def order(self) -> list[str]:
        return [name for run in reversed(self.runs.values()) for name in reversed(run)]


def unordered_order(names: Sequence[str]) -> list[str]:
    """The iteration order of an ``unordered_map`` after emplacing ``names`` in order
    (later duplicates are ignored, as ``emplace`` ignores them)."""
    unique = list(dict.fromkeys(names))
    if len(unique) > EXACT_LIMIT:
        return unique[::-1]  # libstdc++'s order when no two names share a bucket
    digests: dict[str, int] = {}
    table = _Map(1)
    level = -1
    for name in unique:
        if len(digests) + 1 > table.buckets:
            level += 1
            table, old = _Map(_BUCKETS[level]), table.order()
            for node in old:
                table.place(node, digests[node])
        digests[name] = std_hash(name.encode("utf-8", "surrogatepass"))
        table.place(name, digests[name])
    return table.order()
