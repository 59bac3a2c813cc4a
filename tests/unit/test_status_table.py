"""The start-up model table, drawn as Triton's TablePrinter draws it."""

from __future__ import annotations

from service.core.index import IndexEntry
from service.core.startup_table import model_table


def test_model_table_lists_versions_states_and_reasons() -> None:
    table = model_table(
        [
            IndexEntry("add_sub", "1", "READY", ""),
            IndexEntry("add_sub", "2", "READY", ""),
            IndexEntry("broken", "", "UNAVAILABLE", "unknown backend 'x'"),
            IndexEntry("idle", "", "", ""),  # on disk, never loaded: not listed
        ]
    )
    assert table.splitlines() == [
        "+---------+---------+----------------------------------+",
        "| Model   | Version | Status                           |",
        "+---------+---------+----------------------------------+",
        "| add_sub | 1       | READY                            |",
        "| add_sub | 2       | READY                            |",
        "| broken  | -       | UNAVAILABLE: unknown backend 'x' |",
        "+---------+---------+----------------------------------+",
    ]


def test_empty_table_has_its_header() -> None:
    assert model_table([]).splitlines() == [
        "+-------+---------+--------+",
        "| Model | Version | Status |",
        "+-------+---------+--------+",
        "+-------+---------+--------+",
    ]


def test_model_without_versions_in_triton_words() -> None:
    table = model_table([IndexEntry("b", "1", "READY", "")], versionless=["a", "c"])
    assert table.splitlines()[3:6] == [
        "| a     | -       | Not loaded: No model version was found |",
        "| b     | 1       | READY                                  |",
        "| c     | -       | Not loaded: No model version was found |",
    ]
