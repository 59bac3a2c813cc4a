"""What the v1 tests (gRPC and HTTP) share: a model repository and request builders.

The requests are built with NVIDIA's own message classes (v1_reference.py), as an old
client would send them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import models
import numpy as np
import sequence_models as seq
from onnx import TensorProto
from v1_reference import reference

#: Labels of the classifiers' four classes.
LABELS = ("zero", "one", "two", "three")

ADD_SUB_IO = (
    [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])],
    [("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "FP32", [-1])],
)


def _classifier_config(name: str, max_batch_size: int) -> str:
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {max_batch_size}\n'
        'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "PROB" data_type: TYPE_FP32 dims: [ 4 ] '
        'label_filename: "labels.txt" } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )


def build_repository(repo: Path) -> Path:
    """add_sub (variable dims), add_sub_batched (dynamic batcher that waits for 2),
    classifier / classifier_nobatch (PROB = INPUT, labels file), strings (BYTES identity),
    seq (the INT32 accumulator: sequence batcher, START control, implicit state)."""
    models.write_model(
        repo,
        "add_sub",
        models.add_sub_model(),
        models.make_config("add_sub", *ADD_SUB_IO, max_batch_size=8),
    )
    models.write_model(
        repo,
        "add_sub_batched",
        models.add_sub_model(),
        models.make_config(
            "add_sub_batched",
            *ADD_SUB_IO,
            max_batch_size=8,
            extra="dynamic_batching { preferred_batch_size: [ 2 ] "
            "max_queue_delay_microseconds: 5000000 }",
        ),
    )
    for name, batch in (("classifier", 4), ("classifier_nobatch", 0)):
        dims: list[int | str] = ["batch", 4] if batch else [4]
        model_dir = models.write_model(
            repo,
            name,
            models.identity_model(TensorProto.FLOAT, dims, input_name="INPUT", output_name="PROB"),
            _classifier_config(name, batch),
        )
        (model_dir / "labels.txt").write_text("\n".join(LABELS) + "\n", encoding="utf-8")
    models.write_model(
        repo,
        "strings",
        models.identity_model(TensorProto.STRING, ["batch", 1]),
        models.make_config(
            "strings", [("INPUT0", "BYTES", [1])], [("OUTPUT0", "BYTES", [1])], max_batch_size=4
        ),
    )
    models.write_model(
        repo, "seq", seq.accumulator_model(), seq.accumulator_config("seq", instance_count=1)
    )
    return repo


def header(
    batch_size: int,
    inputs: Sequence[tuple[str, Sequence[int]]],
    outputs: Sequence[str | tuple[str, int]],
    **fields: Any,
) -> Any:
    """An InferRequestHeader: inputs as (name, dims); outputs as names, or (name, k) for
    the top-k classes."""
    ref = reference()
    H = ref.InferRequestHeader
    out = []
    for item in outputs:
        if isinstance(item, tuple):
            out.append(H.Output(name=item[0], cls=H.Output.Class(count=item[1])))
        else:
            out.append(H.Output(name=item))
    return H(
        batch_size=batch_size,
        input=[H.Input(name=name, dims=list(dims)) for name, dims in inputs],
        output=out,
        **fields,
    )


def infer_request(model: str, head: Any, raw: Sequence[bytes], version: int = -1) -> Any:
    return reference().InferRequest(
        model_name=model, model_version=version, meta_data=head, raw_input=list(raw)
    )


def add_sub_request(a: np.ndarray, b: np.ndarray, model: str = "add_sub", **fields: Any) -> Any:
    """Both outputs raw; ``a`` and ``b`` are [batch, n] FP32."""
    head = header(
        a.shape[0],
        [("INPUT0", a.shape[1:]), ("INPUT1", b.shape[1:])],
        ["OUTPUT0", "OUTPUT1"],
        **fields,
    )
    return infer_request(model, head, [a.tobytes(), b.tobytes()])


def seq_request(correlation_id: int, value: int, *, start: bool = False, end: bool = False) -> Any:
    """One step of an accumulator sequence (batch 1, INPUT [1] INT32)."""
    H = reference().InferRequestHeader
    flags = (H.FLAG_SEQUENCE_START if start else 0) | (H.FLAG_SEQUENCE_END if end else 0)
    head = header(
        1, [("INPUT", [1])], ["OUTPUT"], correlation_id=correlation_id, flags=flags, id=value
    )
    return infer_request("seq", head, [np.array([[value]], dtype=np.int32).tobytes()])


def output(response: Any, index: int, dtype: Any) -> np.ndarray:
    """Raw output ``index`` shaped [batch, *dims] from the response header."""
    meta = response.meta_data
    dims = list(meta.output[index].raw.dims)
    return np.frombuffer(response.raw_output[index], dtype=dtype).reshape([meta.batch_size, *dims])


def classes(out: Any) -> list[list[tuple[int, float, str]]]:
    """An output's batch_classes as [(idx, value, label), ...] per batch entry."""
    return [[(c.idx, round(c.value, 5), c.label) for c in row.cls] for row in out.batch_classes]
