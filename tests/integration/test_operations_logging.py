"""Logging over the wire: LogSettings reads and changes settings at run time, every request
error is logged once with model, version and request id and never with tensor contents,
and --log-file / --log-format work from the command line."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import bytes_array, expect_error, infer_input, running_server
from operations_support import write_add_sub
from server_process import REPO_ROOT, SERVICE_PYTHON, ServerProcess
from tritonclient.grpc import service_pb2, service_pb2_grpc

SECRET = 7_654_321  # a tensor value that must never reach the log
SECRET_TEXT = "TOP-SECRET-PAYLOAD"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ops_logging")
    write_add_sub(path, "plain")
    return path


@pytest.fixture
def server(repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo]) as proc:
        yield proc


def _settings(response: service_pb2.LogSettingsResponse) -> dict[str, object]:
    return {
        name: getattr(value, value.WhichOneof("parameter_choice"))
        for name, value in response.settings.items()
    }


def _bad_inputs() -> list[grpcclient.InferInput]:
    """INT32 tensors for an FP32 model: refused, and the values must stay out of the log."""
    a = np.full((1, 4), SECRET, dtype=np.int32)
    return [infer_input("INPUT0", a, "INT32"), infer_input("INPUT1", a, "INT32")]


def _wait_for(server: ServerProcess, fragment: str) -> list[str]:
    deadline = time.monotonic() + 10
    while True:
        found = [line for line in server.log.splitlines() if fragment in line]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


def test_log_settings_read_and_change(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        assert _settings(client.get_log_settings()) == {
            "log_file": "",
            "log_info": True,
            "log_warning": True,
            "log_error": True,
            "log_verbose_level": 0,
            "log_format": "default",
        }
        changed = client.update_log_settings({"log_verbose_level": 2, "log_format": "ISO8601"})
        assert _settings(changed)["log_verbose_level"] == 2
        assert _settings(changed)["log_format"] == "ISO8601"
        assert _settings(client.get_log_settings())["log_info"] is True  # others unchanged
        assert "logging" in client.get_server_metadata().extensions


@pytest.mark.parametrize(
    ("settings", "code", "message"),
    [
        ({"log_file": "/tmp/x.log"}, "UNIMPLEMENTED", "can not be updated through network"),
        ({"log_format": "xml"}, "INVALID_ARGUMENT", "invalid argument for log_format, got: xml"),
    ],
)
def test_log_settings_errors(
    server: ServerProcess, settings: dict[str, object], code: str, message: str
) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        expect_error(lambda: client.update_log_settings(settings), code, contains=[message])
        assert _settings(client.get_log_settings())["log_format"] == "default"


@pytest.mark.parametrize(
    ("name", "typed", "message"),
    [
        ("log_info", "uint32_param", "expect boolean for 'log_info'"),
        ("log_verbose_level", "string_param", "expect int32 for 'log_verbose_level'"),
        ("log_format", "bool_param", "expect string for 'log_format'"),
    ],
)
def test_mistyped_log_settings(server: ServerProcess, name: str, typed: str, message: str) -> None:
    """tritonclient types values by setting name, so a raw stub sends the wrong type."""
    request = service_pb2.LogSettingsRequest()
    setattr(
        request.settings[name], typed, {"uint32_param": 1, "string_param": "1"}.get(typed, True)
    )
    with grpc.insecure_channel(server.url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.LogSettings(request, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == message


def test_request_errors_logged_once_as_json_without_tensors(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        client.update_log_settings({"log_format": "json"})
        expect_error(
            lambda: client.infer("plain", _bad_inputs(), request_id="req-unary"),
            "INVALID_ARGUMENT",
        )
        text = bytes_array([SECRET_TEXT])
        expect_error(
            lambda: client.infer(
                "plain", [infer_input("INPUT0", text, "BYTES")], request_id="req-bytes"
            ),
            "INVALID_ARGUMENT",
        )
    with grpc.insecure_channel(server.url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="plain", model_version="1", id="req-s")
        request.inputs.add(name="INPUT0", datatype="INT32", shape=[1]).contents.int_contents.append(
            SECRET
        )
        (reply,) = list(stub.ModelStreamInfer(iter([request]), timeout=10))
        assert reply.error_message
    unary = _wait_for(server, "req-unary")
    stream = _wait_for(server, "req-s")
    assert len(unary) == 1 and len(stream) == 1, server.log
    record = json.loads(unary[0])
    assert record["level"] == "WARNING"
    assert (record["rpc"], record["model"], record["version"], record["request_id"]) == (
        "ModelInfer",
        "plain",
        "",
        "req-unary",
    )
    assert record["code"] == "INVALID_ARGUMENT"
    assert "data-type is 'INT32'" in record["message"]
    streamed = json.loads(stream[0])
    assert (streamed["rpc"], streamed["version"]) == ("ModelStreamInfer", "1")
    assert len(_wait_for(server, "req-bytes")) == 1
    assert str(SECRET) not in server.log
    assert SECRET_TEXT not in server.log


def test_warnings_switched_off_at_run_time(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        client.update_log_settings({"log_warning": False})
        expect_error(
            lambda: client.infer("plain", _bad_inputs(), request_id="quiet"), "INVALID_ARGUMENT"
        )
        client.update_log_settings({"log_warning": True})
        expect_error(
            lambda: client.infer("plain", _bad_inputs(), request_id="loud"), "INVALID_ARGUMENT"
        )
    assert len(_wait_for(server, "request id 'loud'")) == 1
    assert "quiet" not in server.log


def test_log_file_and_iso8601_from_flags(repo: Path, tmp_path: Path) -> None:
    """With --log-file nothing goes to stderr; the file holds the lines, ISO8601-stamped."""
    log_file = tmp_path / "server.log"
    args = [SERVICE_PYTHON, "-m", "service", "--model-repository", str(repo)]
    args += ["--grpc-address", "127.0.0.1", "--grpc-port", "0", "--metrics-port", "0"]
    args += [f"--log-file={log_file}", "--log-format=ISO8601"]
    proc = subprocess.Popen(
        args, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while not (log_file.exists() and "Started GRPCInferenceService" in log_file.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        lines = log_file.read_text().splitlines()
        # Every line is stamped, but for the rows of the start-up model table, which (as
        # in Triton) is one multi-line message: "+---+" rules and "| cell |" rows.
        assert all(
            re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ [IWE] \d+ \S+:\d+\] ", line)
            or re.match(r"[+|]", line)
            for line in lines
        ), lines
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0
        assert proc.stderr is not None
        assert proc.stderr.read() == ""
        assert "server stopped" in log_file.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_unwritable_log_file_stops_the_start(repo: Path, tmp_path: Path) -> None:
    server = ServerProcess([repo], extra_args=[f"--log-file={tmp_path}/no/such/dir/x.log"])
    with pytest.raises(RuntimeError, match="server exited with 1"):
        server.start()
    server.kill()
    assert "cannot open log file" in server.log
