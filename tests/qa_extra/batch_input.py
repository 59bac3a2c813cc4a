"""Ragged batching (issue 28, item 7): qa/L0_batch_input's onnx pass, on the repository its
test.sh builds from Triton's own generators.

- ``qa_ragged_model_repository``: qa/common/gen_qa_ragged_models.py ``--onnx`` (the two
  models ``onnx_batch_input`` and ``onnx_batch_item``), registered here with the runner's
  generators (its manifest has no ragged repository of its own);
- ``ragged_element_count_acc_zero``, ``ragged_acc_shape``, ``batch_item_flatten``,
  ``batch_item``: copies of those with test.sh's ``sed`` edits (the batch input kinds);
- ``ragged_io``: qa_identity_model_repository's ``onnx_nobatch_zero_1_float32`` made a
  batching model whose INPUT0 is ragged and whose OUTPUT0 is scattered back by each
  request's input shape (``batch_output BATCH_SCATTER_WITH_INPUT_SHAPE``).

The eight tests send four requests on one gRPC stream and expect Triton to batch them
(``max_queue_delay_microseconds: 1000000``, ``max_batch_size: 4``) and to compute the
batch inputs as its backends do (backend_input_collector.cc).

**Not validated, so not in ``SUITES``**: on the reference Triton 2.51 all eight fail
(0 passed, 8 failed, 2026-11-27). Its core loads these configs and batches the requests,
but the ONNX models run through the python-based ORT stand-in, a python-backend model,
and Triton's python backend (r24.10) implements neither batch inputs nor ragged
flattening: ORT answers "Required inputs (['BATCH_AND_SIZE_INPUT', 'BATCH_INPUT']) are
missing from input feed" and, for ragged_io, "Invalid rank for input: INPUT0 Got: 2
Expected: 1". Validating it needs Triton's own ORT backend. The suite is kept here as
``NOT_VALIDATED``; ``TRITON_QA_NOT_VALIDATED=1`` adds such suites to the selection
(tests/qa_suites.py), e.g. to run it against this project (8 passed here).
"""

from __future__ import annotations

from typing import Any

import manifest  # type: ignore[import-not-found]
from manifest import Suite  # type: ignore[import-not-found]

RAGGED = "qa_ragged_model_repository"
manifest.GENERATORS.setdefault(
    RAGGED, ["gen_qa_ragged_models.py", "--onnx", "--onnx_opset=0", "--models_dir={out}"]
)


def _copy(r: Any, src: str, name: str, *subs: tuple[str, str]) -> str:
    """``cp -r $DATADIR/<src> models/<name>`` and the ``sed -i`` edits, in order."""
    r.copy(r.gen(RAGGED, src), name)
    cfg = f"{name}/config.pbtxt"
    r.sub(cfg, src, name)
    for pattern, repl in subs:
        r.sub(cfg, pattern, repl)
    return cfg


def repo_batch_input(r: Any) -> None:
    to_acc = ("BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT")
    _copy(r, "onnx_batch_input", "ragged_element_count_acc_zero")
    _copy(
        r,
        "onnx_batch_input",
        "ragged_acc_shape",
        to_acc,
        ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE"),
    )
    cfg = _copy(r, "onnx_batch_input", "batch_item_flatten")
    r.sub(cfg, "-1", "-1, -1", count=1)  # sed "0,/-1/{s/-1/-1, -1/}"
    r.sub(cfg, *to_acc)
    r.sub(cfg, "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "BATCH_ITEM_SHAPE_FLATTEN")
    _copy(r, "onnx_batch_item", "batch_item")
    src = "onnx_nobatch_zero_1_float32"
    r.copy(r.gen("qa_identity_model_repository", src), "ragged_io")
    cfg = "ragged_io/config.pbtxt"
    r.sub(cfg, src, "ragged_io")
    r.sub(cfg, r"^max_batch_size:.*", "max_batch_size: 4")
    r.sub(cfg, 'name: "INPUT0"', 'name: "INPUT0"\nallow_ragged_batch: true')
    r.append(
        cfg,
        'batch_output [{target_name: "OUTPUT0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
        'source_input: "INPUT0" }] dynamic_batching { max_queue_delay_microseconds: 1000000 }',
    )


SUITES: list[Any] = []

NOT_VALIDATED = [
    Suite(
        "batch_input_onnx",
        "L0_batch_input",
        "batch_input_test.py",
        ["BatchInputTest"],
        repo_batch_input,
        args=["--exit-timeout-secs=120"],
        default=False,
        reference="not-validated",
        note="test.sh's BACKENDS=onnx pass: 5 models from gen_qa_ragged_models.py and "
        "gen_qa_identity_models.py (ONNX); the reference's python-based ORT stand-in gets "
        "no batch inputs and unflattened ragged inputs (0/8 there)",
    ),
]
