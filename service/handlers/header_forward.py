"""``--grpc-header-forward-pattern``: gRPC metadata whose key matches becomes a request
parameter (a string), as Triton's gRPC frontend does.

Triton prefixes the pattern with ``(?i)`` (header names are case-insensitive) and
searches each key with RE2, so ``(?-i)`` at the start makes the match case-sensitive.
``compile_forward_pattern`` turns that RE2 form into a Python pattern. Only the mapping
from metadata to parameters lives here; the core treats the result as any parameter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..core.parameters import CONSUMED
from ..types import InferRequest

__all__ = ["compile_forward_pattern", "forward_headers"]

_FLAG_GROUP = re.compile(r"\(\?([imsU]*)(?:-([imsU]*))?\)")


def _python_syntax(pattern: str) -> str:
    """RE2 applies a bare flag group such as ``(?-i)`` to the rest of its enclosing group
    (every later alternative included); Python allows flags only at the start or scoped,
    ``(?-i:...)``. Rewrite each bare group as a scoped one, closed before each ``|`` and
    reopened after it, and closed where its enclosing group closes."""
    out: list[str] = []
    scoped: list[list[str]] = [[]]  # per nesting level: the open scoped flag groups
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            escaped = pattern[i : i + 2]
            out.append("\\Z" if escaped == "\\z" else escaped)
            i += 2
            continue
        if char == "[":  # a class: copied as is; a leading ] (after ^) is literal
            end = i + 1
            end += pattern[end : end + 1] == "^"
            end += pattern[end : end + 1] == "]"
            while end < len(pattern) and pattern[end] != "]":
                end += 2 if pattern[end] == "\\" else 1
            out.append(pattern[i : end + 1])
            i = end + 1
            continue
        flags = _FLAG_GROUP.match(pattern, i) if char == "(" else None
        if flags is not None:
            if "U" in flags.group(0) or flags.group(0) in ("(?)", "(?-)"):
                raise re.error("unsupported flag group " + flags.group(0), pattern, i)
            opener = flags.group(0)[:-1] + ":"
            out.append(opener)
            scoped[-1].append(opener)
            i = flags.end()
            continue
        if char == "(":
            scoped.append([])
        elif char == ")" and len(scoped) > 1:
            out.append(")" * len(scoped.pop()))
        elif char == "|":
            out.append(")" * len(scoped[-1]) + "|" + "".join(scoped[-1]))
            i += 1
            continue
        out.append(char)
        i += 1
    out.append(")" * len(scoped[0]))
    return "".join(out)


def compile_forward_pattern(pattern: str) -> re.Pattern[str]:
    """Triton's ``(?i)`` + pattern, in Python syntax. Raises ``re.error`` when invalid."""
    return re.compile(_python_syntax("(?i)" + pattern))


def forward_headers(
    pattern: re.Pattern[str], metadata: Iterable[tuple[str, str | bytes]], request: InferRequest
) -> None:
    """Add each matching metadata entry to ``request.parameters`` as a string.

    A header wins over an explicit parameter of the same name (Triton appends it after
    the request's own, and the later one is what a model reads). Keys the server would
    interpret itself (``sequence_id``, ``priority``, ``triton_*``, ...) are left out:
    Triton passes them to the backend as plain strings, which one map cannot express."""
    for key, value in metadata:
        if pattern.search(key) is None or key in CONSUMED or key.startswith("triton_"):
            continue
        if isinstance(value, bytes):  # a "-bin" key
            value = value.decode("utf-8", "replace")
        request.parameters[key] = value
