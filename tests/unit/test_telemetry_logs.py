"""Log formats, level switches, verbose levels, and LogSettings' validation rules."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.errors import InvalidArgument, Unimplemented
from service.telemetry.logs import LogControl
from service.telemetry.settings import LogSettings

log = logging.getLogger("service.test")


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    yield io.StringIO()


@pytest.fixture
def control(stream: io.StringIO) -> Iterator[LogControl]:
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    ctl = LogControl(LogSettings(), stream)
    yield ctl
    ctl.close()
    root.setLevel(saved[0])
    for handler in saved[1]:
        root.addHandler(handler)


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_default_format_is_tritons(control: LogControl, stream: io.StringIO) -> None:
    log.warning("careful %s", "now")
    (line,) = lines(stream)
    assert re.fullmatch(
        r"W\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ test_telemetry_logs\.py:\d+\] careful now", line
    ), line


def test_iso8601_format(control: LogControl, stream: io.StringIO) -> None:
    control.update({"log_format": "ISO8601"})
    log.error("broken")
    (line,) = lines(stream)
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ E \d+ test_telemetry_logs\.py:\d+\] broken", line
    ), line


def test_json_lines_carry_request_context(control: LogControl, stream: io.StringIO) -> None:
    control.update({"log_format": "json"})
    context = {"rpc": "ModelInfer", "model": "m", "version": "1", "request_id": "r", "code": "X"}
    log.warning("failed: %s", "why", extra=context)
    try:
        raise ValueError("inner")
    except ValueError:
        log.exception("with traceback")
    first, second = (json.loads(line) for line in lines(stream))
    assert first["level"] == "WARNING"
    assert first["message"] == "failed: why"
    assert {k: first[k] for k in context} == context
    assert first["logger"] == "service.test"
    assert first["time"].endswith("Z")
    assert "ValueError: inner" in second["exception"]


def test_level_switches(control: LogControl, stream: io.StringIO) -> None:
    control.update({"log_info": False, "log_warning": False})
    log.info("info")
    log.warning("warning")
    log.error("error")
    assert [line.split("] ")[1] for line in lines(stream)] == ["error"]
    control.update({"log_error": False, "log_info": True})
    log.error("error 2")
    log.info("info 2")
    assert [line.split("] ")[1] for line in lines(stream)] == ["error", "info 2"]


def test_verbose_levels(control: LogControl, stream: io.StringIO) -> None:
    log.debug("hidden at level 0")
    control.update({"log_verbose_level": 1})
    log.debug("level 1")
    log.debug("level 2 only", extra={"verbose": 2})
    control.update({"log_verbose_level": 2, "log_info": False})
    log.debug("level 2 now", extra={"verbose": 2})
    log.info("info is off")
    assert [line.split("] ")[1] for line in lines(stream)] == ["level 1", "level 2 now"]
    assert logging.getLogger().level == logging.DEBUG


def test_disabled_debug_is_cut_at_the_logger_level(control: LogControl) -> None:
    """With verbose 0 a log.debug call stops at isEnabledFor: no record is built."""
    assert not log.isEnabledFor(logging.DEBUG)
    control.update({"log_info": False})
    assert not log.isEnabledFor(logging.INFO)
    assert log.isEnabledFor(logging.WARNING)


def test_snapshot_uses_tritons_names(control: LogControl) -> None:
    assert control.snapshot() == {
        "log_file": "",
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "default",
    }


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"log_info": 1}, "expect boolean for 'log_info'"),
        ({"log_warning": "true"}, "expect boolean for 'log_warning'"),
        ({"log_error": None}, "expect boolean for 'log_error'"),
        ({"log_verbose_level": True}, "expect int32 for 'log_verbose_level'"),
        ({"log_format": 3}, "expect string for 'log_format'"),
        ({"log_format": "xml"}, "invalid argument for log_format, got: xml"),
    ],
)
def test_invalid_settings(control: LogControl, changes: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        control.update(changes)  # type: ignore[arg-type]
    assert info.value.message == message


def test_changes_apply_all_or_nothing(control: LogControl) -> None:
    with pytest.raises(InvalidArgument):
        control.update({"log_verbose_level": 3, "log_info": "no"})
    assert control.snapshot()["log_verbose_level"] == 0


def test_log_file_cannot_change_at_run_time(control: LogControl) -> None:
    with pytest.raises(Unimplemented, match="can not be updated through network protocol"):
        control.update({"log_file": "/tmp/elsewhere.log"})


def test_unknown_settings_are_ignored(control: LogControl) -> None:
    assert control.update({"log_colour": "blue"}) == control.snapshot()


def test_log_file(tmp_path: Path) -> None:
    root = logging.getLogger()
    saved = list(root.handlers)
    path = tmp_path / "server.log"
    ctl = LogControl(LogSettings(file=str(path), format="json"))
    try:
        log.info("to the file")
        assert ctl.snapshot()["log_file"] == str(path)
    finally:
        ctl.close()
        for handler in saved:
            root.addHandler(handler)
    assert json.loads(path.read_text())["message"] == "to the file"
