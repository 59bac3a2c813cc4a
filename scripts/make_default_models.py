#!/usr/bin/env python3
"""Rebuild the embedded default model repository (Triton layout, ONNX Runtime models).

Usage::

    .venv/bin/python scripts/make_default_models.py [--out DIR]

DIR defaults to ``service/default_repository``. The generated ``config.pbtxt`` and
``1/model.onnx`` files are committed to git; this script is how they are rebuilt. It is
deterministic: a rerun produces byte-identical files (files whose bytes are unchanged are not
rewritten), and it verifies every model in onnxruntime before it writes anything.

Models:

* ``add_sub``         FP32 ``OUTPUT0 = INPUT0 + INPUT1``, ``OUTPUT1 = INPUT0 - INPUT1``
                      (built with onnx.helper; full config).
* ``text_upper``      BYTES model: ONNX ``StringNormalizer(case_change_action="UPPER")``.
* ``iris_classifier`` scikit-learn LogisticRegression trained on the bundled iris data set and
                      converted with skl2onnx; its config.pbtxt has no inputs/outputs so the
                      server's auto-complete has to fill them from the ONNX signature.

Needs the dev extras (onnx, scikit-learn, skl2onnx) besides numpy and onnxruntime.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "service" / "default_repository"

# Opset 17 / IR <= 9 keeps every model loadable by onnxruntime 1.15 and later (the server needs
# >= 1.20); newer IR versions are rejected by older runtimes.
OPSET = 17
IR_VERSION = 9
PRODUCER = "scripts/make_default_models.py"

# Predictions the converted iris model must give for the first sample of each class
# (rows 0, 50 and 100 of sklearn's iris data), and its class probabilities as computed when
# this script was written (onnxruntime 1.31.1, scikit-learn 1.9.1, skl2onnx 1.20.0). Labels are
# asserted exactly; probabilities within IRIS_PROB_ATOL, which absorbs float32 and
# solver/BLAS noise across versions while still catching a different model.
IRIS_ROWS = (0, 50, 100)
IRIS_EXPECTED_LABELS = (0, 1, 2)
IRIS_EXPECTED_PROBS = (
    (9.8166e-01, 1.8343e-02, 1.4395e-08),
    (2.1180e-03, 8.7423e-01, 1.2365e-01),
    (8.9112e-07, 3.9370e-03, 9.9606e-01),
)
IRIS_PROB_ATOL = 1e-3


# --------------------------------------------------------------------------------------------
# model builders


def _finish(model: onnx.ModelProto, doc: str) -> onnx.ModelProto:
    """Stamp fixed metadata (no versions, no timestamps) so the bytes are reproducible."""
    model.producer_name = PRODUCER
    model.producer_version = ""
    model.doc_string = doc
    onnx.checker.check_model(model, full_check=True)
    return model


def build_add_sub() -> onnx.ModelProto:
    """FP32 add/sub over [batch, n]; both dims symbolic so any batch (<= max_batch_size) works."""
    shape: list[str | int | None] = ["batch", "n"]
    graph = helper.make_graph(
        nodes=[
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
        ],
        name="add_sub",
        inputs=[
            helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("INPUT1", TensorProto.FLOAT, shape),
        ],
        outputs=[
            helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("OUTPUT1", TensorProto.FLOAT, shape),
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
    )
    return _finish(model, "OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (FP32)")


def build_text_upper() -> onnx.ModelProto:
    """String (Triton BYTES) model: upper-cases each element of a 1-D string tensor.

    StringNormalizer only accepts shape [C] or [1, C]; the ONNX input is ["n"] (so the Triton
    config is max_batch_size 0, dims [-1]). onnxruntime rejects an empty tensor (n == 0) for
    this op: "Single dimension value must be greater than 0".

    locale="C": the op's default locale is "en_US.UTF-8", which most containers do not have,
    and then onnxruntime fails to *create the session* ("Failed to construct locale with
    name:en_US.UTF-8"). "C" exists everywhere; with it ASCII letters are upper-cased and any
    other UTF-8 text passes through unchanged ("straße é" -> "STRAßE é"). "C.UTF-8" would
    upper-case non-ASCII letters too but is missing on some hosts, and "" would depend on the
    server's environment (LANG), so neither is used.
    """
    graph = helper.make_graph(
        nodes=[
            helper.make_node(
                "StringNormalizer",
                ["TEXT"],
                ["UPPER"],
                name="upper",
                case_change_action="UPPER",
                locale="C",
            )
        ],
        name="text_upper",
        inputs=[helper.make_tensor_value_info("TEXT", TensorProto.STRING, ["n"])],
        outputs=[helper.make_tensor_value_info("UPPER", TensorProto.STRING, ["n"])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
    )
    return _finish(model, "UPPER = upper-case(TEXT), ASCII letters only (locale C)")


def build_iris_classifier() -> onnx.ModelProto:
    """LogisticRegression on sklearn's bundled iris data, converted by skl2onnx.

    lbfgs is deterministic for fixed data; random_state is set anyway. The graph name is passed
    explicitly because skl2onnx otherwise names the graph with a random uuid (different bytes on
    every run), and the opset imports are de-duplicated (skl2onnx lists the default domain
    twice).
    """
    from skl2onnx import convert_sklearn  # type: ignore[import-untyped]
    from skl2onnx.common.data_types import FloatTensorType  # type: ignore[import-untyped]
    from sklearn.datasets import load_iris  # type: ignore[import-untyped]
    from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]

    x, y = load_iris(return_X_y=True)
    clf = LogisticRegression(max_iter=500, random_state=0).fit(x, y)
    model: onnx.ModelProto = convert_sklearn(
        clf,
        name="iris_classifier",
        initial_types=[("input", FloatTensorType([None, 4]))],
        options={id(clf): {"zipmap": False}},
        target_opset={"": OPSET, "ai.onnx.ml": 3},
    )
    seen: dict[str, int] = {}
    for op in model.opset_import:
        seen[op.domain] = max(seen.get(op.domain, 0), op.version)
    del model.opset_import[:]
    for domain, version in sorted(seen.items()):
        model.opset_import.append(helper.make_opsetid(domain, version))
    if model.ir_version > IR_VERSION:
        raise SystemExit(f"skl2onnx produced IR version {model.ir_version} > {IR_VERSION}")
    return _finish(
        model,
        "scikit-learn LogisticRegression(max_iter=500, random_state=0) on the iris data set",
    )


# --------------------------------------------------------------------------------------------
# config.pbtxt


ADD_SUB_CONFIG = """\
name: "add_sub"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [ -1 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_FP32
    dims: [ -1 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [ -1 ]
  },
  {
    name: "OUTPUT1"
    data_type: TYPE_FP32
    dims: [ -1 ]
  }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

TEXT_UPPER_CONFIG = """\
# BYTES model: ONNX StringNormalizer(UPPER, locale "C"): ASCII letters are upper-cased, other
# UTF-8 text passes through unchanged. TEXT must hold at least one element. StringNormalizer
# only takes rank-1 input here, hence no batching (max_batch_size 0) and dims [ -1 ].
name: "text_upper"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [
  {
    name: "TEXT"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }
]
output [
  {
    name: "UPPER"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def iris_config(signature: Sequence[str]) -> str:
    """Minimal config (no name, inputs or outputs) that exercises the server's auto-complete.

    ``signature`` lines (the ONNX I/O as read from the converted model) go in a comment so a
    reader can see what auto-complete is expected to produce.
    """
    lines = [
        "# Deliberately minimal: no name (defaults to the directory name, iris_classifier), no",
        "# input/output. The server's auto-complete fills them from the ONNX signature:",
        *(f"#   {line}" for line in signature),
        "# With max_batch_size > 0 the leading (batch) dim is dropped from the config dims, so",
        '# auto-complete yields input "input" TYPE_FP32 dims [ 4 ], output "probabilities"',
        '# TYPE_FP32 dims [ 3 ], and output "label" TYPE_INT64 whose per-sample shape is empty',
        "# (Triton's onnxruntime backend writes that as dims [ 1 ] with reshape { shape: [ ] }).",
        "# (Triton also adds dynamic_batching { } since max_batch_size > 1.)",
        "# Labels: 0 setosa, 1 versicolor, 2 virginica.",
        'platform: "onnxruntime_onnx"',
        "max_batch_size: 16",
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# verification


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _onnx_signature(model: onnx.ModelProto) -> list[str]:
    """Human-readable ``input|output name TYPE [dims]`` lines for a model's graph I/O."""
    out = []
    for kind, values in (("input ", model.graph.input), ("output", model.graph.output)):
        for v in values:
            t = v.type.tensor_type
            dims = [
                d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "N")
                for d in t.shape.dim
            ]
            elem = TensorProto.DataType.Name(t.elem_type)
            out.append(f"{kind} {v.name!r:17} {elem:6} [{', '.join(dims)}]")
    return out


def verify_add_sub(model: onnx.ModelProto) -> None:
    sess = _session(model)
    rng = np.random.default_rng(0)
    for batch, n in ((1, 16), (8, 3), (3, 1)):
        a = rng.standard_normal((batch, n), dtype=np.float32)
        b = rng.standard_normal((batch, n), dtype=np.float32)
        out0, out1 = sess.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
        assert out0.dtype == np.float32 and out0.shape == (batch, n)
        np.testing.assert_array_equal(out0, a + b)
        np.testing.assert_array_equal(out1, a - b)


def verify_text_upper(model: onnx.ModelProto) -> None:
    # What onnxruntime needs for string tensors: a numpy array of dtype=object holding *str*
    # (or a "<U" unicode array). Two traps:
    #  * object arrays of *bytes* are accepted but each element is str()-ed, so b"hello" is fed
    #    as the text "b'hello'" and comes back as "B'HELLO'";
    #  * fixed-width bytes arrays ("|S5") are read without terminators and produce garbage
    #    (["HELLOWORLD", "WORLD"]).
    # So the server must decode BYTES elements to str (UTF-8) before run(), and encode the str
    # results (always an object array of str) back to UTF-8 bytes.
    sess = _session(model)
    raw = np.array([b"hello", b"World"], dtype=object)
    text = np.array([e.decode("utf-8") for e in raw], dtype=object)
    (upper,) = sess.run(["UPPER"], {"TEXT": text})
    assert upper.dtype == object and upper.shape == (2,), (upper.dtype, upper.shape)
    assert [s.encode("utf-8") for s in upper] == [b"HELLO", b"WORLD"], upper
    (upper,) = sess.run(["UPPER"], {"TEXT": np.array(["abc 123", "straße é", ""], dtype=object)})
    assert list(upper) == ["ABC 123", "STRAßE é", ""], upper


def verify_iris(model: onnx.ModelProto) -> None:
    from sklearn.datasets import load_iris

    sess = _session(model)
    x, y = load_iris(return_X_y=True)
    x32 = x.astype(np.float32)
    label, probs = sess.run(["label", "probabilities"], {"input": x32[list(IRIS_ROWS)]})
    assert label.dtype == np.int64 and label.shape == (3,), (label.dtype, label.shape)
    assert probs.dtype == np.float32 and probs.shape == (3, 3), (probs.dtype, probs.shape)
    assert tuple(int(v) for v in label) == IRIS_EXPECTED_LABELS, label
    np.testing.assert_allclose(probs, np.array(IRIS_EXPECTED_PROBS), rtol=0, atol=IRIS_PROB_ATOL)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=0, atol=1e-5)
    # And the model as a whole is the usual ~97% training-accuracy iris classifier.
    (all_labels,) = sess.run(["label"], {"input": x32})
    accuracy = float(np.mean(all_labels == y))
    assert accuracy > 0.95, accuracy


# --------------------------------------------------------------------------------------------
# writing


def _write_if_changed(path: Path, data: bytes) -> bool:
    """Write ``data`` unless the file already holds exactly those bytes; True if written."""
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return True


def _write_model(out: Path, name: str, model: onnx.ModelProto, config: str) -> None:
    model_path = out / name / "1" / "model.onnx"
    config_path = out / name / "config.pbtxt"
    for path, data in (
        (model_path, model.SerializeToString(deterministic=True)),
        (config_path, config.encode("utf-8")),
    ):
        changed = _write_if_changed(path, data)
        print(f"  {'wrote    ' if changed else 'unchanged'} {path} ({len(data)} bytes)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="repository directory")
    args = parser.parse_args(argv)
    out: Path = args.out

    models: dict[str, tuple[onnx.ModelProto, Any, str | None]] = {
        "add_sub": (build_add_sub(), verify_add_sub, ADD_SUB_CONFIG),
        "text_upper": (build_text_upper(), verify_text_upper, TEXT_UPPER_CONFIG),
        "iris_classifier": (build_iris_classifier(), verify_iris, None),
    }
    for name, (model, verify, _) in models.items():
        verify(model)
        print(f"{name}: verified in onnxruntime {ort.__version__}")
        for line in _onnx_signature(model):
            print(f"  {line}")

    print(f"writing {out}")
    for name, (model, _, config) in models.items():
        if config is None:
            config = iris_config(_onnx_signature(model))
        _write_model(out, name, model, config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
