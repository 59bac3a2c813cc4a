"""--lame-duck-secs: off by default (Triton refuses new requests from the signal on)."""

from __future__ import annotations

import pytest
from server_process import DEFAULT_REPOSITORY

from service.config import parse_args

BASE = ["--model-repository", str(DEFAULT_REPOSITORY)]


def test_off_by_default_and_set_by_the_flag() -> None:
    assert parse_args(BASE).lame_duck_secs == 0.0
    assert parse_args([*BASE, "--lame-duck-secs", "1.5"]).lame_duck_secs == 1.5


def test_a_negative_lame_duck_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([*BASE, "--lame-duck-secs", "-1"])
    assert "--lame-duck-secs must be >= 0" in capsys.readouterr().err
