"""BLS tracing: a traced request's Python model passes ``trace=request.trace()`` to its
BLS request, which is then traced as a child of the request's span (Triton's child
trace), in the same trace; ``request.trace().get_context()`` is the request's context
(JSON of its propagation fields) when traced, None otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from otlp_collector import KIND_INTERNAL, OtlpCollector
from server_process import ServerProcess

TRACE_ID = "5bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"

CALLER = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            called = pb_utils.InferenceRequest(
                model_name="bls_leaf", inputs=[x], requested_output_names=["Y"],
                trace=request.trace(),
            ).exec()
            context = request.trace().get_context() or ""
            responses.append(pb_utils.InferenceResponse([
                pb_utils.get_output_tensor_by_name(called, "Y"),
                pb_utils.Tensor("CONTEXT", np.array([context.encode()], np.object_)),
            ]))
        return responses
"""

LEAF = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2)]
            )
            for r in requests
        ]
"""


def _config(name: str, context: bool) -> str:
    extra = ', { name: "CONTEXT" data_type: TYPE_STRING dims: [ 1 ] }' if context else ""
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        f'output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }}{extra} ]\n'
    )


def _repo(root: Path) -> Path:
    for name, source in (("bls_caller", CALLER), ("bls_leaf", LEAF)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(source)
        (root / name / "config.pbtxt").write_text(_config(name, name == "bls_caller"))
    return root


def _call(url: str, headers: dict[str, str] | None = None) -> grpcclient.InferResult:
    tensor = grpcclient.InferInput("X", [2], "FP32")
    tensor.set_data_from_numpy(np.array([1.0, 2.0], np.float32))
    with grpcclient.InferenceServerClient(url) as client:
        return client.infer("bls_caller", [tensor], headers=headers)


def test_a_bls_request_is_traced_under_its_callers_span(tmp_path: Path) -> None:
    _repo(tmp_path)
    with OtlpCollector() as collector:
        trace = ["--trace-config=level=TIMESTAMPS", "--trace-config=rate=1"]
        trace.append(f"--trace-config=opentelemetry,url={collector.url}")
        service = ServerProcess([tmp_path], extra_args=trace).start()
        try:
            result = _call(service.url, {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
        finally:
            assert service.stop() == 0, service.log
        spans = [s for s in collector.received() if s.trace_id == TRACE_ID]
    np.testing.assert_array_equal(result.as_numpy("Y"), [2.0, 4.0])
    (infer,) = [s for s in spans if s.name == "ModelInfer"]
    (bls,) = [s for s in spans if s.name == "bls"]
    assert bls.parent_id == infer.span_id and bls.kind == KIND_INTERNAL
    assert bls.attributes["triton.model_name"] == "bls_leaf"
    assert infer.start_ns <= bls.start_ns and bls.end_ns <= infer.end_ns
    parts = {s.name for s in spans if s.parent_id == bls.span_id}
    assert {"queue", "compute_input", "compute_infer", "compute_output"} <= parts
    context = json.loads(result.as_numpy("CONTEXT")[0])
    assert context["traceparent"].startswith(f"00-{TRACE_ID}-{infer.span_id}-")


def test_in_tritons_trace_mode_a_bls_request_is_a_child_trace(tmp_path: Path) -> None:
    """Triton's trace file: the BLS request is a trace of its own whose head names the
    caller's trace as ``parent_id``, without the gRPC timestamps; the model sees no
    OpenTelemetry context (get_context() is None)."""
    trace_file = tmp_path / "trace.json"
    args = [f"--trace-config=triton,file={trace_file}", "--trace-config=level=TIMESTAMPS"]
    args += ["--trace-config=rate=1", "--trace-config=mode=triton"]
    service = ServerProcess([_repo(tmp_path / "repo")], extra_args=args).start()
    try:
        result = _call(service.url)
    finally:
        assert service.stop() == 0, service.log
    assert result.as_numpy("CONTEXT").tolist() == [b""]
    entries = json.loads(trace_file.read_text())
    heads = {e["model_name"]: e for e in entries if "model_name" in e}
    caller, leaf = heads["bls_caller"], heads["bls_leaf"]
    assert leaf["parent_id"] == caller["id"] and "parent_id" not in caller
    stamps = {t["name"] for e in entries if e["id"] == leaf["id"] for t in e.get("timestamps", [])}
    assert {"REQUEST_START", "QUEUE_START", "COMPUTE_START", "REQUEST_END"} <= stamps
    assert not any(name.startswith("GRPC_") for name in stamps)
