"""The NumPy 1 names a Python model's worker restores (decision 051): each is missing from
NumPy 2 with NumPy's own error, comes back with its NumPy 1 meaning, and nothing NumPy
still has is replaced."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from service.backends.python.numpy1_names import numpy1_names

# Run in a fresh interpreter: restoring changes the numpy module for the whole process.
PROBE = textwrap.dedent(
    """
    import json
    import numpy as np
    from service.backends.python.numpy1_names import numpy1_names, restore_numpy1_names

    errors = {}
    for name in numpy1_names():
        try:
            getattr(np, name)
        except AttributeError as exc:
            errors[name] = str(exc)
    kept = {n: id(v) for n, v in vars(np).items()}
    restored = restore_numpy1_names()
    changed = [n for n, v in kept.items() if id(vars(np)[n]) != v]
    print(json.dumps({
        "errors": errors,
        "restored": restored,
        "again": restore_numpy1_names(),
        "changed": changed,
        "values": [
            float(np.NINF), float(np.PINF), str(np.NaN), float(np.NZERO),
            np.dtype(np.float_).name, np.dtype(np.complex_).name, np.dtype(np.string_).name,
            np.dtype(np.unicode_).name, float(np.round_(2.25, 1)), bool(np.alltrue([1, 0])),
            float(np.product([2, 3])), np.cast[np.int8]([1.7]).dtype.name,
            np.asfarray([1, 2], dtype=np.int32).dtype.name, np.in1d([[1, 2]], [2]).tolist(),
            np.issubclass_(1, int), float(np.trapz([1.0, 1.0])), np.sctype2char(np.float32),
        ],
        "gone": hasattr(np, "find_common_type"),
    }))
    """
)


@pytest.fixture(scope="module")
def probe() -> dict[str, object]:
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(run.stdout)
    return result


@pytest.mark.skipif(np.__version__.startswith("1."), reason="NumPy 1 has these names")
def test_each_name_is_one_numpy2_removed(probe: dict[str, object]) -> None:
    errors = probe["errors"]
    assert isinstance(errors, dict)
    assert sorted(errors) == sorted(numpy1_names())
    assert (
        errors["NINF"] == "`np.NINF` was removed in the NumPy 2.0 release. Use `-np.inf` instead."
    )


def test_restored_once_without_replacing_numpy_names(probe: dict[str, object]) -> None:
    assert probe["restored"] == list(numpy1_names())
    assert probe["again"] == []
    assert probe["changed"] == []


def test_restored_names_mean_what_they_meant_in_numpy1(probe: dict[str, object]) -> None:
    assert probe["values"] == [
        -np.inf, np.inf, "nan", -0.0, "float64", "complex128", "bytes", "str",
        2.2, False, 6.0, "int8", "float64", [False, True], False, 1.0, "f",
    ]  # fmt: skip


def test_numpy1_functions_numpy2_dropped_stay_missing(probe: dict[str, object]) -> None:
    assert probe["gone"] is False
