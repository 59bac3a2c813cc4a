"""qa/L0_nan_inf (issue 39, item 7): a Python model written for NumPy 1 (``np.NINF``, a
name NumPy 2 removed) answering nan, inf and -inf over HTTP (JSON and binary) and gRPC.

The model is Triton's own, served as test.sh serves it (``models/`` of the qa folder);
the server's workers restore NumPy 1's removed aliases before ``model.py`` is imported
(docs/decisions/051-numpy-1-python-models.md). Validated on the reference Triton 2.51,
whose python models run on NumPy 1.26.
"""

from __future__ import annotations

from typing import Any

from manifest import Suite  # type: ignore[import-not-found]


def repo_nan_inf(r: Any) -> None:
    """test.sh: ``--model-repository=`pwd`/models`` (the qa folder's own models)."""
    r.copy(r.qa("L0_nan_inf/models"), ".")


SUITES = [
    Suite(
        "nan_inf",
        "L0_nan_inf",
        "nan_inf_test.py",
        ["NanInfTest"],
        repo_nan_inf,
        default=False,
    ),
]
