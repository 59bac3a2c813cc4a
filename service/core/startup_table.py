"""Triton's start-up model table (``Model | Version | Status``), from the repository index.

Triton logs it once its models have loaded; people read it to see at a glance what serves
and why a model does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .index import IndexEntry

__all__ = ["format_table", "model_table"]


def format_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A ``+---+`` bordered table as Triton's TablePrinter draws it: left-aligned cells,
    one space of padding, a rule under the header and at the end."""
    body = [list(r) for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(headers)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells: Sequence[str]) -> str:
        return "|" + "|".join(f" {c:<{w}} " for c, w in zip(cells, widths, strict=True)) + "|"

    return "\n".join([rule, line(headers), rule, *(line(r) for r in body), rule])


def model_table(entries: Iterable[IndexEntry], versionless: Iterable[str] = ()) -> str:
    """Every model the server tried to load, per version, with its state and reason;
    ``versionless``: models with no version to load, in Triton's words."""
    rows = []
    for entry in entries:
        if not entry.state and not entry.version:
            continue  # on disk, never asked for (explicit mode): Triton does not list it
        status = f"{entry.state}: {entry.reason}" if entry.reason else entry.state
        rows.append((entry.name, entry.version or "-", status))
    rows += [(name, "-", "Not loaded: No model version was found") for name in versionless]
    rows.sort(key=lambda row: row[0])  # stable: versions stay in order
    return format_table(("Model", "Version", "Status"), rows)
