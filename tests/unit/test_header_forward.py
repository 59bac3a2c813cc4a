"""Header forwarding: Triton's pattern rules (``(?i)`` prefix, RE2 flag groups) in Python
(``wire.header_forward``, one copy for both processes), what a matching header becomes in
each, and the flags of the service and the gateway."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway import header_forward as gateway_forward
from gateway.config import parse_args as gateway_args
from inference import grpc_service_pb2 as pb
from service.config import parse_args as service_args
from service.grpc_frontend import header_forward as service_forward
from service.types import InferRequest
from wire.header_forward import compile_forward_pattern


@pytest.mark.parametrize(
    ("pattern", "matches", "misses"),
    [
        ("my_header.*", ["my_header_1", "MY_HEADER", "x-my_header"], ["myheader"]),
        ("MY_HEADER.*", ["my_header_1"], ["header_1"]),
        ("(?-i)MY_HEADER.*", ["MY_HEADER_1"], ["my_header_1"]),
        # RE2: the flag holds for the rest of the group, later alternatives included.
        ("a(?-i)b|c", ["Ab", "c"], ["AB", "C", "aB"]),
        ("(x(?-i)y|w)z", ["XyZ", "wZ"], ["XYZ", "WZ"]),
        ("^exact$", ["EXACT"], ["exactly"]),
        (r"end\z", ["the-END"], ["end-x"]),
        ("[(]", ["a(b"], ["ab"]),
        ("", ["anything"], []),  # Triton's "(?i)" alone matches every name
    ],
)
def test_patterns_search_names_as_triton_does(
    pattern: str, matches: list[str], misses: list[str]
) -> None:
    compiled = compile_forward_pattern(pattern)
    assert [m for m in matches if not compiled.search(m)] == []
    assert [m for m in misses if compiled.search(m)] == []


@pytest.mark.parametrize("pattern", ["my_(header", "(?U)a", "(?)x", "a)", "*a"])
def test_invalid_patterns_raise(pattern: str) -> None:
    with pytest.raises(re.error):
        compile_forward_pattern(pattern)


def test_service_forwards_matching_metadata_as_strings() -> None:
    request = InferRequest("m", parameters={"my_dup": 5, "kept": True})
    metadata = [
        ("my_a", "1"),
        ("my_dup", "header"),
        ("my_bin-bin", b"\xc3\xa9\xff"),
        ("other", "x"),
        ("my_sequence_id", "7"),
    ]
    pattern = service_forward.compile_forward_pattern("MY_.*")
    service_forward.forward_headers(pattern, metadata, request)
    assert request.parameters == {
        "my_dup": "header",
        "kept": True,
        "my_a": "1",
        "my_bin-bin": "é\ufffd",
        "my_sequence_id": "7",
    }


def test_keys_the_server_interprets_are_not_forwarded() -> None:
    """A header named sequence_id or priority would steer the request, not reach the model."""
    pattern = service_forward.compile_forward_pattern(".*")
    request = InferRequest("m")
    keys = ["sequence_id", "priority", "timeout", "sequence_start", "triton_x", "user"]
    service_forward.forward_headers(pattern, [(k, "1") for k in keys], request)
    assert request.parameters == {"user": "1"}
    message = pb.ModelInferRequest()
    gateway_forward.forward_headers(pattern, dict.fromkeys(keys, "1"), message)
    assert dict(message.parameters) == {"user": pb.InferParameter(string_param="1")}


def test_gateway_sets_string_parameters_and_restores_utf8() -> None:
    message = pb.ModelInferRequest()
    message.parameters["my_dup"].int64_param = 3
    headers = {
        "my_text": "värde".encode().decode("latin-1"),  # as the ASGI header bytes arrive
        "my_latin": "\xe9",  # not UTF-8: kept as decoded
        "my_dup": "h",
        "content-type": "application/json",
    }
    pattern = gateway_forward.compile_forward_pattern("MY_.*")
    gateway_forward.forward_headers(pattern, headers, message)
    assert {k: v.string_param for k, v in message.parameters.items()} == {
        "my_text": "värde",
        "my_latin": "é",
        "my_dup": "h",
    }


def test_service_flag(tmp_path: Path) -> None:
    base = ["--model-repository", str(tmp_path)]
    assert service_args(base).header_forward is None
    pattern = service_args([*base, "--grpc-header-forward-pattern", "(?-i)X.*"]).header_forward
    assert pattern is not None and pattern.search("X1") and not pattern.search("x1")


def test_gateway_flag() -> None:
    assert gateway_args([]).header_forward is None
    pattern = gateway_args(["--http-header-forward-pattern", "my_.*"]).header_forward
    assert pattern is not None and pattern.search("My_Header")


def test_invalid_flag_exits_with_code_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        service_args(["--model-repository", str(tmp_path), "--grpc-header-forward-pattern", "("])
    assert stopped.value.code == 1
    assert (
        "--grpc-header-forward-pattern: invalid regular expression '('" in capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as stopped:
        gateway_args(["--http-header-forward-pattern", "a)"])
    assert stopped.value.code == 1
    assert (
        "--http-header-forward-pattern: invalid regular expression 'a)'" in capsys.readouterr().err
    )
