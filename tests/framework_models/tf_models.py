"""TensorFlow SavedModels for tests/integration/test_tensorflow_backend.py, written into
``<root>/<name>/1/model.savedmodel`` (configs, where any, are the tests' own). Run by the
server's Python: ``python tf_models.py ROOT NAME[:KIND]...``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

F32x4 = tf.TensorSpec([None, 4], tf.float32)


class AddSub(tf.Module):
    """Batchable: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 ([-1,4] FP32)."""

    @tf.function(input_signature=[F32x4, F32x4])
    def serve(self, INPUT0: tf.Tensor, INPUT1: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"OUTPUT0": INPUT0 + INPUT1, "OUTPUT1": INPUT0 - INPUT1}


class Strings(tf.Module):
    """BYTES: TEXT [-1,2] -> UPPER, upper-cased."""

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.string)])
    def serve(self, TEXT: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"UPPER": tf.strings.upper(TEXT)}


class Scale(tf.Module):
    """Two signatures: serving_default doubles X, ``triple`` triples it ([3] INT32)."""

    @tf.function(input_signature=[tf.TensorSpec([3], tf.int32)])
    def double(self, X: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"Y": X * 2}

    @tf.function(input_signature=[tf.TensorSpec([3], tf.int32)])
    def triple(self, X: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"Y": X * 3}


def _save(module: tf.Module, kind: str, folder: Path) -> None:
    if kind == "scale":
        signatures = {"serving_default": module.double, "triple": module.triple}
    elif kind == "predict_only":  # no serving_default: Triton takes another, warning
        signatures = {"predict": module.double}
    else:
        signatures = {"serving_default": module.serve}
    tf.saved_model.save(module, str(folder / "model.savedmodel"), signatures=signatures)


MODELS = {"add_sub": AddSub, "strings": Strings, "scale": Scale, "predict_only": Scale}


def main() -> None:
    root = Path(sys.argv[1])
    for name in sys.argv[2:]:
        kind = name.split(":")[-1]
        folder = root / name.split(":")[0] / "1"
        folder.mkdir(parents=True, exist_ok=True)
        _save(MODELS[kind](), kind, folder)


if __name__ == "__main__":
    main()
