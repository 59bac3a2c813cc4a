"""One MLP in every framework the server serves, and its in-process throughput.

The same architecture and weights (``tests/models.py``'s ``mlp_weights``: ``layers`` x
(MatMul + Add), Relu between) written as ONNX, TorchScript, a TensorFlow SavedModel and
OpenVINO IR, with a config per backend (``framework-backends`` serves them), and
``bench``: back-to-back runs of one model at one batch size by its own framework, set up
as the server's backend sets it up (threads, inference mode, a v1 session on the
SavedModel's ``serve`` MetaGraph called as the backend calls it, TensorFlow's environment
defaults: Eigen kernels, not oneDNN's, decision 062), in a process of its own so that no
pool of another framework runs beside it. Run by the server's Python (all four frameworks
installed):

    python -m loadtest.framework_mlp write ROOT --width 2048 --layers 3 --threads 2 --batching
    python -m loadtest.framework_mlp bench pytorch ROOT/mlp_pytorch --batch 16 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from loadtest import REPO_ROOT

if str(REPO_ROOT / "tests") not in sys.path:
    sys.path.append(str(REPO_ROOT / "tests"))

from models import mlp_model, mlp_weights

from service.backends.tensorflow.rules import TF_ENVIRONMENT


def _import_tensorflow() -> Any:
    """TensorFlow, imported under the environment defaults the server's backend sets."""
    for name, value in TF_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    import tensorflow as tf

    return tf


BACKENDS = ("onnxruntime", "pytorch", "tensorflow", "openvino")
MAX_RUNS = 100_000  # bounds a measurement whatever the clock does

# Where each backend's file goes in the version folder, the config's backend line, and its
# thread-count parameters (so that served and in-process runs use the same pools).
FILES = {
    "onnxruntime": "model.onnx",
    "pytorch": "model.pt",
    "tensorflow": "model.savedmodel",
    "openvino": "model.xml",
}
HEADERS = {
    "onnxruntime": 'backend: "onnxruntime"\nplatform: "onnxruntime_onnx"',
    "pytorch": 'backend: "pytorch"\nplatform: "pytorch_libtorch"',
    "tensorflow": 'backend: "tensorflow"\nplatform: "tensorflow_savedmodel"',
    "openvino": 'backend: "openvino"',
}


def thread_parameters(backend: str, threads: int) -> dict[str, str]:
    """The config parameters that give one instance ``threads`` compute threads."""
    n = str(threads)
    return {
        "onnxruntime": {"intra_op_thread_count": n, "inter_op_thread_count": "1"},
        "pytorch": {"INTRA_OP_THREAD_COUNT": n, "INTER_OP_THREAD_COUNT": "1"},
        "tensorflow": {"TF_NUM_INTRA_THREADS": n, "TF_NUM_INTER_THREADS": "1"},
        # Triton's openvino backend fixes the batch to max_batch_size (ov::set_batch) and
        # runs a smaller one only padded (decision 047)
        "openvino": {"INFERENCE_NUM_THREADS": n, "ENABLE_BATCH_PADDING": "YES"},
    }[backend]


def config(
    name: str, backend: str, width: int, threads: int, max_batch: int, batching: bool
) -> str:
    """The model's config.pbtxt: INPUT0 / OUTPUT0 FP32 [width], one CPU instance."""
    params = "".join(
        f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n'
        for k, v in thread_parameters(backend, threads).items()
    )
    io = f"data_type: TYPE_FP32 dims: [ {width} ]"
    return (
        f'name: "{name}"\n{HEADERS[backend]}\nmax_batch_size: {max_batch}\n'
        f'input [ {{ name: "INPUT0" {io} }} ]\noutput [ {{ name: "OUTPUT0" {io} }} ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        + ("dynamic_batching { }\n" if batching else "")
        + params
    )


# --------------------------------------------------------------------------- writers


def _write_onnx(path: Path, width: int, layers: int) -> None:
    path.write_bytes(mlp_model(width=width, layers=layers, seed=0).SerializeToString())


def _write_torch(path: Path, width: int, layers: int) -> None:
    import torch

    class Mlp(torch.nn.Module):
        def __init__(self, weights: list[tuple[np.ndarray, np.ndarray]]) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList()
            for w, b in weights:
                linear = torch.nn.Linear(width, width)
                linear.weight.data = torch.from_numpy(np.ascontiguousarray(w.T))
                linear.bias.data = torch.from_numpy(b)
                self.layers.append(linear)

        def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
            h = INPUT0
            for i, layer in enumerate(self.layers):
                h = layer(h)
                if i < len(self.layers) - 1:
                    h = torch.relu(h)
            return h

    module = Mlp(mlp_weights(width, layers, 0)).eval()
    torch.jit.save(torch.jit.script(module), str(path))


def _write_tensorflow(path: Path, width: int, layers: int) -> None:
    tf = _import_tensorflow()
    weights = [(tf.constant(w), tf.constant(b)) for w, b in mlp_weights(width, layers, 0)]

    class Mlp(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, width], tf.float32)])
        def serve(self, INPUT0: Any) -> dict[str, Any]:
            h = INPUT0
            for i, (w, b) in enumerate(weights):
                h = tf.matmul(h, w) + b
                if i < len(weights) - 1:
                    h = tf.nn.relu(h)
            return {"OUTPUT0": h}

    module = Mlp()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})


def _write_openvino(path: Path, width: int, layers: int) -> None:
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([-1, width], np.float32, name="INPUT0")
    x.set_layout(ov.Layout("N..."))
    h: Any = x
    weights = mlp_weights(width, layers, 0)
    for i, (w, b) in enumerate(weights):
        h = ops.add(ops.matmul(h, ops.constant(w), False, False), ops.constant(b))
        if i < len(weights) - 1:
            h = ops.relu(h)
    h.output(0).get_tensor().set_names({"OUTPUT0"})
    model = ov.Model([h], [x], "mlp")
    model.get_results()[0].set_layout(ov.Layout("N..."))
    ov.save_model(model, str(path), compress_to_fp16=False)  # FP32 as the other three


WRITERS: dict[str, Callable[[Path, int, int], None]] = {
    "onnxruntime": _write_onnx,
    "pytorch": _write_torch,
    "tensorflow": _write_tensorflow,
    "openvino": _write_openvino,
}


#: Backends whose compute pool is one per process: the server's is sized by whichever of
#: their models loaded last (torch.set_num_threads, as Triton's libtorch backend sets it).
PROCESS_WIDE_POOLS = frozenset({"pytorch"})


def write(
    root: Path,
    prefix: str,
    width: int,
    layers: int,
    threads: int,
    batching: bool,
    process_threads: int | None = None,
) -> None:
    """``<prefix>_<backend>`` for every backend under ``root``, max_batch_size 16.
    ``process_threads``: the thread count for the backends of ``PROCESS_WIDE_POOLS``
    (so that models of one server agree on it), ``threads`` for the others."""
    for backend in BACKENDS:
        name = f"{prefix}_{backend}"
        (root / name / "1").mkdir(parents=True, exist_ok=True)
        WRITERS[backend](root / name / "1" / FILES[backend], width, layers)
        count = threads
        if process_threads is not None and backend in PROCESS_WIDE_POOLS:
            count = process_threads
        text = config(name, backend, width, count, 16, batching)
        (root / name / "config.pbtxt").write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------- in-process runs


def _runner(backend: str, folder: Path, batch: int, width: int, threads: int) -> Callable[[], Any]:
    """One call = one run of the model at ``batch``, set up as the server's backend does."""
    x = np.random.default_rng(0).standard_normal((batch, width), dtype=np.float32)
    path = folder / "1" / FILES[backend]
    if backend == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return lambda: session.run(None, {"INPUT0": x})
    if backend == "pytorch":
        import torch

        torch.set_num_threads(threads)
        module = torch.jit.load(str(path), map_location="cpu")
        tensor = torch.from_numpy(x)

        def run_torch() -> Any:
            with torch.inference_mode():
                return module(tensor).numpy()

        return run_torch
    if backend == "tensorflow":
        tf = _import_tensorflow()
        graph = tf.Graph()
        session_config = tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=threads,
            inter_op_parallelism_threads=1,
            use_per_session_threads=True,
        )
        tf_session = tf.compat.v1.Session(graph=graph, config=session_config)
        with graph.as_default():
            meta = tf.compat.v1.saved_model.loader.load(tf_session, ["serve"], str(path))
        signature = meta.signature_def["serving_default"]
        # The call the backend makes: a callable of the session, its ops in the caller's
        # thread when the inter-op pool would have one thread (decision 068).
        from tensorflow.core.protobuf import config_pb2

        options = config_pb2.CallableOptions(
            feed=[signature.inputs["INPUT0"].name], fetch=[signature.outputs["OUTPUT0"].name]
        )
        options.run_options.inter_op_thread_pool = -1
        run_tf = tf_session._make_callable_from_options(options)
        return lambda: run_tf(x)
    if backend == "openvino":
        import openvino as ov

        compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_NUM_THREADS": threads})
        request = compiled.create_infer_request()

        def run_openvino() -> Any:  # the backend's call: the array read in place
            request.set_tensor("INPUT0", ov.Tensor(x, shared_memory=True))
            request.infer()
            return np.array(request.get_tensor("OUTPUT0").data)

        return run_openvino
    raise ValueError(f"unknown backend {backend!r}")


def bench(
    backend: str, folder: Path, batch: int, width: int, threads: int, seconds: float, parts: int = 4
) -> dict[str, float]:
    """Back-to-back runs for ``seconds`` after a warm-up, in ``parts`` slices: the best
    slice's samples/s and ms per run (a ceiling: on a shared machine a slow slice measures
    the neighbours, as ``loadtest/ceiling.py``), the whole run's samples/s, and the
    process's CPU per sample over the whole run."""
    run = _runner(backend, folder, batch, width, threads)
    warm = time.perf_counter()  # TorchScript's profiling executor settles after a few runs
    while time.perf_counter() - warm < min(1.0, seconds / 2):
        run()
    best, total_runs, start, cpu = 0.0, 0, time.perf_counter(), time.process_time()
    for _ in range(parts):
        runs, begun = 0, time.perf_counter()
        while runs < MAX_RUNS and (runs == 0 or time.perf_counter() - begun < seconds / parts):
            run()
            runs += 1
        best = max(best, runs / (time.perf_counter() - begun))
        total_runs += runs
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {
        "samples_per_s": batch * best,
        "ms_per_run": 1e3 / best,
        "mean_samples_per_s": batch * total_runs / elapsed,
        # every thread of the process (the framework's pools, spinning included): what a
        # sample costs whatever the neighbours took meanwhile
        "cpu_ms_per_sample": 1e3 * cpu / (batch * total_runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.framework_mlp")
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("root", type=Path)
    w.add_argument("--prefix", default="mlp")
    w.add_argument("--batching", action="store_true")
    w.add_argument("--process-threads", type=int, default=None)
    b = sub.add_parser("bench")
    b.add_argument("backend", choices=BACKENDS)
    b.add_argument("folder", type=Path)
    b.add_argument("--batch", type=int, default=16)
    b.add_argument("--seconds", type=float, default=3.0)
    for p in (w, b):
        p.add_argument("--width", type=int, default=2048)
        p.add_argument("--layers", type=int, default=3)
        p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    if args.command == "write":
        shape = (args.width, args.layers, args.threads, args.batching, args.process_threads)
        write(args.root, args.prefix, *shape)
    else:
        shape = (args.batch, args.width, args.threads)
        print(json.dumps(bench(args.backend, args.folder, *shape, args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
