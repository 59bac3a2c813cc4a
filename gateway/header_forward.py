"""``--http-header-forward-pattern``: HTTP headers whose name matches become string
parameters of the inference request, as Triton's HTTP frontend does.

Triton prefixes the pattern with ``(?i)`` and searches each header name with RE2; the
gateway adds the matches to the ModelInferRequest before the RPC, so the service hands
them to the model like any parameter. The RE2 → Python rewrite is the service's
(``service/handlers/header_forward.py``; the gateway does not import the service, and
a unit test keeps the two equal).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from inference import grpc_service_pb2 as pb

__all__ = ["compile_forward_pattern", "forward_headers"]

#: Parameters the service interprets itself: a header of that name cannot pass as a
#: plain string parameter (Triton would), so it is not forwarded.
_CONSUMED = frozenset({"sequence_id", "sequence_start", "sequence_end", "priority", "timeout"})
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
    pattern: re.Pattern[str], headers: Mapping[str, str], request: pb.ModelInferRequest
) -> None:
    """Set each matching header as a string parameter of ``request``; it wins over an
    explicit parameter of the same name (in Triton it comes later, and the later one is
    what a model reads). Header values arrive as latin-1 text; UTF-8 is restored."""
    for name, value in headers.items():
        if pattern.search(name) is None or name in _CONSUMED or name.startswith("triton_"):
            continue
        raw = value.encode("latin-1")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = value
        request.parameters[name].string_param = text
