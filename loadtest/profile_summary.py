"""A py-spy profile (``record --native -f raw``) reduced to what a report can hold.

Raw output is one line per distinct stack, ``frame;frame;...;leaf COUNT``, each frame
``function (file:line)`` or, native, ``function (library)``. The full files run to
megabytes and name this machine's paths; what a decision needs is where the samples
went: in our own code (with everything it calls), in grpc's Cython and C core, in
ONNX Runtime, in uvloop and the kernel beneath it, and the few functions that lead.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Profile", "parse_raw", "summary_lines"]

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<where>[^()]*?)(?::(?P<line>\d+))?\)$")
_OURS = re.compile(r"(^|/)(service|gateway)/[^/]+")
#: Our frames that only hold the process's loop (each sample has them): not the owner.
_ENTRIES = frozenset({"run", "run_frontend", "run_engine", "main", "serve", "_serve_forever"})
#: libuv's sources as py-spy names them (uvloop links libuv in).
_LIBUV = frozenset({"core.c", "linux.c", "loop-watcher.c", "stream.c", "async.c", "timer.c"})


def _ours(func: str, where: str) -> bool:
    return bool(_OURS.search(where)) and func not in _ENTRIES


#: (category, test on a frame) in the order a frame is tested; walking from the leaf to
#: the root, the first frame that matches any decides the sample's owner: our code owns
#: the system calls it makes, uvloop the polling it does between our callbacks.
CATEGORIES = (
    ("ours (with what it calls)", _ours),
    ("grpc (Cython + C core)", lambda func, where: "grpc" in where),
    ("ONNX Runtime", lambda func, where: "onnxruntime" in where),
    ("numpy", lambda func, where: "numpy" in where),
    (
        "uvloop + libuv (polling, I/O)",
        lambda func, where: "uvloop" in where or where in _LIBUV or where == "loop.c",
    ),
    ("asyncio (tasks, futures)", lambda func, where: "asyncio" in where),
)


@dataclass
class Profile:
    """Sample counts of one process."""

    total: int = 0
    categories: Counter[str] = field(default_factory=Counter)
    leaves: Counter[str] = field(default_factory=Counter)  # self samples by frame
    ours: Counter[str] = field(default_factory=Counter)  # inclusive samples of our functions


def _short(where: str) -> str:
    """A frame's location from its package folder on: no machine's path in a report."""
    for anchor in ("site-packages/", "dist-packages/"):
        if anchor in where:
            return where.split(anchor, 1)[1]
    for pattern in (r"(?:^|/)((?:service|gateway|loadtest)/.*)$", r"/lib/python3\.\d+/(.*)$"):
        found = re.search(pattern, where)
        if found:
            return found.group(1)
    return where.rsplit("/", 1)[-1]


def _frame(text: str) -> tuple[str, str]:
    """(function, location without the line) of one raw frame."""
    found = _FRAME.match(text.strip())
    if not found:
        return text.strip(), ""
    return found.group("func"), _short(found.group("where"))


def parse_raw(lines: Iterable[str]) -> Profile:
    """Count the samples of a raw py-spy file by category, leaf and our functions."""
    profile = Profile()
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";")]
        frames = [f for f in frames if not f[0].startswith(("thread (", "process "))]
        if not frames:
            continue
        profile.total += n
        category = "interpreter, kernel (other)"
        for func, where in reversed(frames):
            match = next((name for name, test in CATEGORIES if test(func, where)), None)
            if match is not None:
                category = match
                break
        profile.categories[category] += n
        func, where = frames[-1]
        leaf = f"{func} ({where})" if not where.startswith("0x") else where
        profile.leaves[leaf] += n
        for func, where in {f for f in frames if _ours(*f)}:
            profile.ours[f"{func} ({where})"] += n
    return profile


def summary_lines(profile: Profile, top: int = 12) -> list[str]:
    """Markdown: the categories, the leading self frames, our leading functions."""
    if not profile.total:
        return ["(no samples)"]

    def pct(n: int) -> str:
        return f"{100 * n / profile.total:.1f} %"

    out = [f"{profile.total} samples.", "", "| where | share |", "|---|--:|"]
    out += [f"| {name} | {pct(n)} |" for name, n in profile.categories.most_common()]
    out += ["", "Leading frames (self):", "", "| frame | share |", "|---|--:|"]
    out += [f"| `{name}` | {pct(n)} |" for name, n in profile.leaves.most_common(top)]
    out += ["", "Our leading functions (inclusive):", "", "| function | share |", "|---|--:|"]
    out += [f"| `{name}` | {pct(n)} |" for name, n in profile.ours.most_common(top)]
    return out
