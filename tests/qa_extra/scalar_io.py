"""qa/L0_scalar_io (issue 39, item 6): ONNX models whose input and output have no shape
(gen_qa_ort_scalar_models.py: an Identity with untyped-rank value infos, which ONNX
Runtime reports as scalars) served with config dims ``[1]`` and ``[1, 1]``, as Triton's
ONNX Runtime backend allows a scalar tensor whose config dims are all 1.

Validated on the reference through its python ONNX Runtime stand-in, which hands the
``[1]`` tensors to ONNX Runtime as they are (it accepts them for a value of no known
rank); the rank-0 feed and the refusal of other dims are Triton's ORT backend's, which
the stand-in does not reproduce. test.sh's second step, a server that must refuse to
start once ``onnx_scalar_1dim``'s dims are ``[2]``, is not a qa test file:
tests/integration/test_scalar_onnx.py holds it, with Triton's text.
"""

from __future__ import annotations

from typing import Any

import manifest
from manifest import Suite

# gen_qa_model_repository: gen_qa_ort_scalar_models.py --onnx_opset=$ONNX_OPSET
manifest.GENERATORS.setdefault(
    "qa_scalar_models", ["gen_qa_ort_scalar_models.py", "--onnx_opset=0", "--models_dir={out}"]
)


def repo_scalar_io(r: Any) -> None:
    """test.sh: cp -r $DATADIR/qa_scalar_models/* models/."""
    r.copy(r.gen("qa_scalar_models"), ".")


SUITES = [
    Suite(
        "scalar_io",
        "L0_scalar_io",
        "scalar_test.py",
        ["ScalarIOTest::test_scalar_io"],
        repo_scalar_io,
        env={"BACKENDS": "onnx"},
        default=False,
        reference="pass-ort",
    ),
]
