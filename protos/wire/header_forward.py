"""Triton's header-forward patterns (``--grpc-header-forward-pattern``, and the gateway's
``--http-header-forward-pattern``) in Python's syntax, and which names may be forwarded.

Triton prefixes the pattern with ``(?i)`` (header names are case-insensitive) and searches
each name with RE2, so ``(?-i)`` at the start makes the match case-sensitive.
``compile_forward_pattern`` turns that RE2 form into a Python pattern. Each process maps the
matching names onto its own request type (service: gRPC metadata; gateway: HTTP headers).
"""

from __future__ import annotations

import argparse
import re

__all__ = ["CONSUMED", "compile_forward_pattern", "forwardable", "pattern_flag"]

#: Parameters the server reads itself; they never reach a backend, and a header of that name
#: is not forwarded (Triton passes it on as a plain string, which one map cannot express).
CONSUMED = frozenset({"sequence_id", "sequence_start", "sequence_end", "priority", "timeout"})


def forwardable(name: str) -> bool:
    """A matching header of this name becomes a parameter (not one the server interprets)."""
    return name not in CONSUMED and not name.startswith("triton_")


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


def pattern_flag(
    parser: argparse.ArgumentParser, flag: str, text: str | None
) -> re.Pattern[str] | None:
    """The compiled value of ``flag`` (None when not given). An invalid pattern stops the
    start with exit code 1, as Triton's flag errors do."""
    if text is None:
        return None
    try:
        return compile_forward_pattern(text)
    except re.error as exc:
        parser.exit(
            1, f"{parser.prog}: error: {flag}: invalid regular expression '{text}': {exc.msg}\n"
        )
