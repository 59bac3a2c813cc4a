"""The realistic GPU benchmark models (loadtest/gpu_models.py), small, on the CPU provider:
they build as checked ONNX, run, and give each sample the same answer whatever batch it is
served in, which dynamic batching relies on."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from loadtest.gpu_models import bert_base, resnet50


def _session(model: Any) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_resnet50_runs_and_batches_independently(dtype: Any) -> None:
    session = _session(resnet50(dtype, size=32, classes=10))
    nodes = resnet50(dtype, size=32, classes=10).graph.node
    assert sum(n.op_type == "Conv" for n in nodes) == 53  # ResNet-50's convolutions
    images = np.random.default_rng(0).random((3, 3, 32, 32), dtype=np.float32).astype(dtype)
    (batch,) = session.run(None, {"INPUT0": images})
    (alone,) = session.run(None, {"INPUT0": images[1:2]})
    assert batch.shape == (3, 10) and batch.dtype == dtype
    assert np.isfinite(batch).all()
    tolerance = 1e-2 if dtype == np.float16 else 1e-4
    np.testing.assert_allclose(alone[0], batch[1], rtol=tolerance, atol=tolerance)


def test_bert_base_runs_and_batches_independently() -> None:
    model = bert_base(sequence=8, layers=2, hidden=32, heads=4, ffn=64, vocab=50)
    session = _session(model)
    ids = np.random.default_rng(0).integers(0, 50, (2, 8), dtype=np.int64)
    (batch,) = session.run(None, {"INPUT_IDS": ids})
    (alone,) = session.run(None, {"INPUT_IDS": ids[1:]})
    assert batch.shape == (2, 32) and batch.dtype == np.float32
    assert np.isfinite(batch).all() and np.abs(batch).max() <= 1.0  # tanh-pooled
    np.testing.assert_allclose(alone[0], batch[1], rtol=1e-4, atol=1e-5)
    assert not np.allclose(batch[0], batch[1])  # the ids matter
