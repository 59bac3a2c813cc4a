"""Which request parameters reach a backend, and Triton's errors for the ones that may not."""

from __future__ import annotations

import pytest

from service.core.parameters import backend_parameters
from service.errors import InvalidArgument


def test_consumed_keys_stay_with_the_server_and_the_rest_pass_unchanged() -> None:
    given = {
        "sequence_id": 4,
        "sequence_start": True,
        "sequence_end": False,
        "priority": 1,
        "timeout": 100,
        "triton_enable_empty_final_response": True,
        "binary_data_output": True,  # gRPC passes it on, as Triton's gRPC frontend does
        "s": "x",
        "i": -3,
        "f": 0.5,
    }
    assert backend_parameters(given) == {"binary_data_output": True, "s": "x", "i": -3, "f": 0.5}
    assert backend_parameters({}) == {}


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"triton_other": True},
            "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
            "following keys starting with 'triton_' are allowed: "
            "triton_enable_empty_final_response",
        ),
        (
            {"triton_enable_empty_final_response": 1},
            "invalid value type for 'triton_enable_empty_final_response' parameter, expected "
            "bool_param.",
        ),
        (
            {"blob": b"\x00"},
            "invalid value type for 'blob' parameter, expected int64_param, bool_param, or "
            "string_param.",
        ),
    ],
)
def test_refused_parameters(parameters: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        backend_parameters(parameters)
    assert str(info.value) == message
