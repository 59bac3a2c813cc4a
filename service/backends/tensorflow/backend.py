"""TensorFlow SavedModel instances: one TensorFlow session per instance, as Triton's
tensorflow backend runs them (tensorflow_backend r24.10).

* Loading: the MetaGraph of tag TF_GRAPH_TAG (default ``serve``) is loaded into a session
  of its own graph (``tf.compat.v1.saved_model.loader``: TensorFlow's C++ LoadSavedModel,
  which Triton calls); the served SignatureDef is ``rules.choose_signature``'s.
* Names: the config names tensors by their signature keys; execution feeds and fetches the
  graph tensors those keys map to (Triton's ``inmodel_name_``).
* Threads: the session's intra- and inter-op pools are its own (per-session threads) and
  sized to the instance's share of the cores unless TF_NUM_INTRA_THREADS /
  TF_NUM_INTER_THREADS say, so that instances do not oversubscribe the machine.
* Kernels: TensorFlow's Eigen kernels, not its oneDNN ones (``rules.TF_ENVIRONMENT``,
  decision 062): oneDNN's MatMul reorders all its weights again on every call whose batch
  size wants another weight layout than the first call's, as the batcher's sizes vary.

* Calls: one callable per (feeds, fetches) signature, made once by the session
  (``Session._make_callable_from_options``, what ``make_callable`` builds on) and called
  with the numpy arrays: ``Session.run``'s Python (fetch mappers, feed-dict checks, result
  building) cost ~10x the run of a small graph (decision 068). With one inter-op thread
  (TF_NUM_INTER_THREADS 1, or one core's share) a CPU instance runs the graph's ops in its
  own thread rather than handing them to a pool of one and waiting.

A session's run releases the GIL, so instances in worker threads run in parallel.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .rules import TF_ENVIRONMENT

# Read once, at TensorFlow's import: set first, unless the environment already says.
os.environ.update({name: os.environ.get(name, value) for name, value in TF_ENVIRONMENT.items()})

import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import config_pb2

from inference import model_config_pb2 as mc

from ...errors import Internal, ServerError
from ...repository.completion import ModelSignature
from ..base import Array, InstanceSpec
from ..framework import FrameworkBackend, model_file
from .rules import (
    DEFAULT_TAG,
    SignatureTensor,
    TfOptions,
    check_config,
    choose_signature,
    datatype_of,
    parse_options,
    tensor_spec,
)

__all__ = ["TensorFlowBackend", "TensorFlowInstance"]

log = logging.getLogger(__name__)

# TensorFlow's Python deprecation notices (the v1 loader is Triton's C++ loader's face, on
# purpose) would land in the server log at every load.
tf.get_logger().setLevel(logging.ERROR)

DEFAULT_FILENAME = "model.savedmodel"


def _entries(model: str, kind: str, tensors: Any) -> list[SignatureTensor]:
    """A SignatureDef's inputs or outputs (a map of key -> TensorInfo), in key order."""
    entries = []
    for key in sorted(tensors):
        info = tensors[key]
        dtype_name = types_pb2.DataType.Name(info.dtype)
        shape = info.tensor_shape
        dims = None if shape.unknown_rank else tuple(int(d.size) for d in shape.dim)
        entries.append(
            SignatureTensor(key, info.name, datatype_of(model, kind, key, dtype_name), dims)
        )
    return entries


class TensorFlowBackend(FrameworkBackend["TensorFlowInstance"]):
    name = "tensorflow"

    @property
    def supports_gpu(self) -> bool:
        return bool(tf.config.list_physical_devices("GPU"))

    def _open(
        self, config: mc.ModelConfig, version_path: Path, spec: InstanceSpec
    ) -> TensorFlowInstance:
        options = parse_options(config)
        model_path = model_file(config, version_path, DEFAULT_FILENAME, spec, folder=True)
        session, signature = _load(config.name, model_path, options, spec)
        inputs = _entries(config.name, "input", signature.inputs)
        outputs = _entries(config.name, "output", signature.outputs)
        try:
            check_config(config, inputs, outputs)
        except ServerError:
            session.close()
            raise
        log.info(
            "model '%s' instance '%s' (%s): SavedModel %s, %d intra-op / %d inter-op threads",
            config.name,
            spec.name,
            spec.kind.removeprefix("KIND_"),
            model_path.name,
            options.intra_op_threads or spec.threads,
            options.inter_op_threads or spec.threads,
        )
        # One inter-op thread runs a graph's ops one at a time, as the caller's thread does
        # without the hand-off to the pool and the wait for it (CPU graphs: a graph on
        # several devices has several executors, which TensorFlow runs in its pool anyway).
        inline = spec.kind == "KIND_CPU" and (options.inter_op_threads or spec.threads) == 1
        return TensorFlowInstance(config, spec, session, inputs, outputs, inline)


def _load(model: str, path: Path, options: TfOptions, spec: InstanceSpec) -> tuple[Any, Any]:
    """A session holding the SavedModel's MetaGraph, and the SignatureDef it serves."""
    # KIND_MODEL: the graph's own placement (Triton's MODEL_DEVICE).
    device = {"KIND_GPU": f"/gpu:{spec.device_id}", "KIND_MODEL": None}.get(spec.kind, "/cpu:0")
    session_config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=options.intra_op_threads or spec.threads,
        inter_op_parallelism_threads=options.inter_op_threads or spec.threads,
        use_per_session_threads=options.per_session_threads,
        allow_soft_placement=True,
    )
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph, config=session_config)
    try:
        with graph.as_default(), graph.device(device):
            meta = tf.compat.v1.saved_model.loader.load(
                session, [options.graph_tag or DEFAULT_TAG], str(path)
            )
    except Exception as exc:
        session.close()
        raise Internal(str(exc).strip()) from None
    try:
        chosen = choose_signature(model, list(meta.signature_def), options.signature_def)
    except ServerError:
        session.close()
        raise
    for line in chosen.warnings:
        log.warning("%s", line)
    return session, meta.signature_def[chosen.key]


class TensorFlowInstance:
    def __init__(
        self,
        config: mc.ModelConfig,
        spec: InstanceSpec,
        session: Any,
        inputs: list[SignatureTensor],
        outputs: list[SignatureTensor],
        inline: bool = False,
    ) -> None:
        self.spec = spec
        self._session = session
        self._inline = inline
        batched = config.max_batch_size > 0
        self._signature = ModelSignature(
            inputs=[tensor_spec(e, config.input, batched) for e in inputs],
            outputs=[tensor_spec(e, config.output, batched) for e in outputs],
        )
        self._feeds = {e.key: e.tensor for e in inputs}
        self._fetches = {e.key: e.tensor for e in outputs}
        graph = session.graph
        # What Session.run converts a fed value to (the placeholder's numpy type).
        self._feed_types = {
            e.key: graph.get_tensor_by_name(e.tensor).dtype.as_numpy_dtype for e in inputs
        }
        self._callables: dict[tuple[tuple[str, ...], tuple[str, ...]], Any] = {}

    def signature(self) -> ModelSignature:
        """The SignatureDef's tensors by key: what auto-complete fills the config from."""
        return self._signature

    def execute(self, inputs: Mapping[str, Array], outputs: Sequence[str]) -> dict[str, Array]:
        names = tuple(name for name in inputs if name in self._feeds)
        wanted = tuple(outputs)
        if not wanted:
            return {}  # Session.run runs nothing for no fetches
        types = self._feed_types
        try:
            run = self._callables.get((names, wanted))
            if run is None:
                run = self._callable(names, wanted)
            # asarray: Session.run's conversion of a fed value (a no-op for the batcher's
            # arrays, which already have the config's type).
            results = run(*(np.asarray(inputs[name], dtype=types[name]) for name in names))
        except Exception as exc:
            raise Internal(f"TensorFlow execute failure: {_first_line(exc)}") from exc
        return {name: _array(value) for name, value in zip(wanted, results, strict=True)}

    def _callable(self, names: tuple[str, ...], wanted: tuple[str, ...]) -> Any:
        """The session's callable feeding ``names`` and fetching ``wanted`` (signature keys),
        made on first use and kept: the executor TensorFlow builds for it is the one
        ``Session.run`` would pick for the same feeds and fetches."""
        options = config_pb2.CallableOptions(
            feed=[self._feeds[name] for name in names],
            fetch=[self._fetches[name] for name in wanted],
        )
        if self._inline:
            options.run_options.inter_op_thread_pool = -1  # the caller's thread
        made = self._session._make_callable_from_options(options)
        self._callables[(names, wanted)] = made
        return made

    def close(self) -> None:
        self._callables.clear()  # each releases its handle while the session is open
        if self._session is not None:
            self._session.close()
            self._session = None


def _array(value: Any) -> Array:
    """Session results are numpy arrays (strings as bytes objects); a scalar becomes one."""
    array: Array = np.asarray(value)
    return array


def _first_line(exc: Exception) -> str:
    message = getattr(exc, "message", None) or str(exc)
    return str(message).strip().splitlines()[0] if message else type(exc).__name__
