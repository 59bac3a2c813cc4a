"""The realistic GPU benchmark models (loadtest/gpu_models.py), small, on the CPU provider:
they build as checked ONNX, run, and give each sample the same answer whatever batch it is
served in, which dynamic batching relies on."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from loadtest.gpu_models import bert_base, cnn_model, resnet50


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


def test_gpu_bench_feeds_and_alternating_batches() -> None:
    """gpu-bench's in-process side: a feed per input dtype (ids inside any vocabulary), and
    the alternating figure counts the samples of both batch sizes."""
    from loadtest.scenarios.gpu_bench import alternating, random_feed

    model = bert_base(sequence=8, layers=1, hidden=32, heads=4, ffn=64, vocab=1000)
    session = _session(model)
    feed = random_feed(session, 3)
    assert feed["INPUT_IDS"].shape == (3, 8) and feed["INPUT_IDS"].dtype == np.int64
    assert feed["INPUT_IDS"].min() >= 0 and feed["INPUT_IDS"].max() < 1000
    half = _session(resnet50(np.float16, size=32, classes=10))
    assert random_feed(half, 2)["INPUT0"].dtype == np.float16
    assert alternating(session, 4, 0.05) > 0


def test_gpu_bench_report_names_targets_and_latency() -> None:
    """The verdicts use each model's own target (and the GPU's busy share for the realistic
    ones); the c=1 table says what serving adds to one in-process run."""
    from loadtest.scenarios.gpu_bench import c1_latency, verdict

    assert verdict("mlp", 64, 0.6, 0.1).endswith(": met")
    assert verdict("bert", 64, 0.95, 0.5).endswith("NOT met")  # the GPU only half busy
    assert verdict("resnet50", 64, 0.95, 0.85).endswith(": met")
    row = {"spec": {"model": "mlp", "concurrency": 1}, "latency_ms": {"p50": 2.5}}
    raw = {"rows": [row], "ceiling": {"mlp": {"1": {"best": 10_000.0}}}}
    lines = c1_latency({**raw, "perf_analyzer": {"mlp": 2.1}})
    assert "- mlp at c=1: serving adds 2.000 ms (perf_analyzer) to 0.100 ms" in lines
    assert "- mlp at c=1: serving adds 2.400 ms (Python client) to 0.100 ms" in c1_latency(raw)


def test_cnn_runs_and_batches_independently() -> None:
    session = _session(cnn_model(channels=8, size=16))
    images = np.random.default_rng(0).random((2, 3, 16, 16), dtype=np.float32)
    (batch,) = session.run(None, {"INPUT0": images})
    (alone,) = session.run(None, {"INPUT0": images[1:]})
    assert batch.shape == (2, 10) and np.isfinite(batch).all()
    np.testing.assert_allclose(alone[0], batch[1], rtol=1e-4, atol=1e-5)
