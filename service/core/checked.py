"""Requests validated in a frontend against a snapshot of the engine's models.

The engine's one loop thread is the server's narrowest resource, and Triton's validation
(names, datatypes, shapes, byte sizes, batch size, requested outputs) was the largest
piece of Python it ran per request. Each frontend therefore holds every ready model
version's configuration (``ModelSnapshot``, broadcast by the engine whenever its models
change) and runs the very same ``prepare_job`` on a plain request before sending it. A
request that passes crosses with a ``Checked`` mark: the version's generation, its batch
size, its outputs and, for a model whose responses the engine caches, the cache key of
small inputs (hashing is per byte); the engine, finding that same generation loaded,
builds the job's arrays over the request's bytes without checking them again
(``checked_job``) and looks the key up as it is. It then sends the backend's outputs
unshaped, and the frontend reshapes and classifies them (core/shaping.py) with the version
it checked against, whose labels the snapshot carries: the same generation is the same
load, so the same config and label files.

The engine stays the authority. A request the frontend could not check (a model it does
not know yet, shared memory, BYTES tensors), one that failed there, or one
whose version has since been replaced is validated in the engine as before, so every
error text, and every refusal of a request checked against an older configuration,
comes from the configuration actually loaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from inference import model_config_pb2 as mc
from wire import datatypes

from ..cache import small_key
from ..errors import ServerError
from ..scheduling.base import Array, Job
from ..shm.binding import uses_shared_memory
from ..types import InferRequest
from .model import ModelVersion, io_specs
from .validation import job_of, prepare_job

__all__ = ["Checked", "ModelSnapshot", "checked_job", "snapshot"]

#: (generation, batch size, the outputs to compute or None for all of them, the response
#: cache key or None)
Checked = tuple[int, int, list[str] | None, bytes | None]

#: {output: its classification labels} (``ModelVersion.labels``)
Labels = dict[str, tuple[str, ...]]

#: name -> (the version "" resolves to,
#:          {version: (generation, serialized config, cached, labels)})
Snapshot = dict[str, tuple[int, dict[int, tuple[int, bytes, bool, Labels]]]]


def snapshot(versions: Iterable[ModelVersion], cache: bool = False) -> Snapshot:
    """The engine's ready versions as frontends validate against them. Ensembles, decoupled
    and sequence models are left out: their requests are validated step by step, stream
    through the engine's own path, or go to a scheduler that validates them itself. So is a
    name that models of several repositories share (--model-namespacing): the engine
    refuses its requests as ambiguous."""
    table: Snapshot = {}
    namespaces: dict[str, str] = {}
    shared: set[str] = set()
    for model in versions:
        if namespaces.setdefault(model.name, model.namespace) != model.namespace:
            shared.add(model.name)
        config = model.config
        if (
            config.platform == "ensemble"
            or config.model_transaction_policy.decoupled
            or config.HasField("sequence_batching")
        ):
            continue
        latest, entries = table.setdefault(model.name, (0, {}))
        cached = cache and config.response_cache.enable
        entries[model.version] = (
            model.generation,
            config.SerializeToString(),
            cached,
            model.labels,
        )
        table[model.name] = (max(latest, model.version), entries)
    for name in shared:
        table.pop(name, None)
    return table


#: What a plain request's validation depends on, besides its version: per input its
#: name, datatype, shape and byte count; the names of the outputs it asks for (None:
#: all). Only for a request without parameters (its own, its tensors') whose inputs are
#: raw and not BYTES: for those ``prepare_job`` reads nothing else, so one that passed
#: gives the same ``Checked`` for every request with the same signature.
Signature = tuple[tuple[tuple[str, str, tuple[int, ...], int], ...], tuple[str, ...] | None]

#: Signatures remembered per version; past this the memo starts over (a client sending
#: ever new shapes costs a validation each, as without it, and no memory).
PASSED_MAX = 256


def _signature(request: InferRequest) -> Signature | None:
    """``request``'s Signature, or None when it has parameters, shared memory, typed
    contents or BYTES inputs (the full check then runs)."""
    if request.parameters:
        return None
    inputs = []
    for tensor in request.inputs:
        raw = tensor.raw
        if raw is None or tensor.parameters or tensor.datatype == "BYTES":
            return None
        inputs.append((tensor.name, tensor.datatype, tensor.shape, len(raw)))
    outputs = request.outputs
    if not outputs:
        return tuple(inputs), None
    names = []
    for output in outputs:
        if output.parameters:
            return None
        names.append(output.name)
    return tuple(inputs), tuple(names)


class _Version:
    __slots__ = ("cached", "generation", "model", "passed")

    def __init__(
        self, name: str, version: int, generation: int, config: bytes, cached: bool, labels: Labels
    ) -> None:
        parsed = mc.ModelConfig.FromString(config)
        self.model = ModelVersion(name, version, parsed, labels=labels)
        self.model.inputs = io_specs(list(parsed.input))
        self.model.outputs = io_specs(list(parsed.output))
        self.generation = generation
        self.cached = cached
        # Signatures of requests that passed ``prepare_job`` against this very load (a
        # reload is a new _Version), with the mark they got. Never for a cached model:
        # its mark carries a key of the input values.
        self.passed: dict[Signature, tuple[Checked, ModelVersion]] = {}


class ModelSnapshot:
    """A frontend's copy of the engine's models (``snapshot``), by the version strings
    requests name them with ("" for the latest ready one)."""

    def __init__(self) -> None:
        self._versions: dict[tuple[str, str], _Version] = {}

    def update(self, table: Snapshot) -> None:
        old = {(k[0], v.model.version): v for k, v in self._versions.items()}
        versions: dict[tuple[str, str], _Version] = {}
        for name, (latest, entries) in table.items():
            for number, (generation, config, cached, labels) in entries.items():
                known = old.get((name, number))
                if known is None or known.generation != generation or known.cached != cached:
                    known = _Version(name, number, generation, config, cached, labels)
                versions[(name, str(number))] = known
                if number == latest:
                    versions[(name, "")] = known
        self._versions = versions

    def check(self, request: InferRequest) -> Checked | None:
        """Validate ``request`` here; None when the engine must (see the module's text)."""
        mark = self.mark(request)
        return None if mark is None else mark[0]

    def mark(self, request: InferRequest) -> tuple[Checked, ModelVersion] | None:
        """``check``, with the version checked against: the one to shape the response's
        outputs with (core/shaping.py) should the engine run that very version, even if a
        reload replaces it here meanwhile."""
        known = self._versions.get((request.model_name, request.model_version))
        if known is None:
            return None
        signature = None if known.cached else _signature(request)
        if signature is not None:
            hit = known.passed.get(signature)
            if hit is not None:  # the same checks passed for this signature before
                return hit
        elif uses_shared_memory(request):
            return None
        for tensor in request.inputs:
            if tensor.raw is None or tensor.datatype == "BYTES":
                return None
        model = known.model
        try:
            job = prepare_job(model, request)
        except ServerError:
            return None  # the engine refuses it, in the words of the config it has loaded
        key = (
            small_key(model.name, model.version, job.inputs, job.outputs) if known.cached else None
        )
        outputs = job.outputs if request.outputs else None
        mark = (known.generation, job.batch_size, outputs, key), model
        if signature is not None:
            if len(known.passed) >= PASSED_MAX:
                known.passed.clear()
            known.passed[signature] = mark
        return mark


def checked_job(model: ModelVersion, request: InferRequest, checked: Checked) -> Job:
    """The job of a request a frontend validated against this very version: its arrays
    over the request's bytes, in the model's shapes, and its parameters parsed
    (``prepare_job`` without the checks)."""
    _, batch_size, outputs, _ = checked
    specs = model.inputs
    leading: tuple[int, ...] = (batch_size,) if model.batched else ()
    inputs: dict[str, Array] = {}
    for tensor in request.inputs:
        spec = specs[tensor.name]
        # dtype positional: numpy parses a keyword argument at twice the cost
        array: Any = np.frombuffer(tensor.raw, _NUMPY[spec.datatype])  # type: ignore[arg-type]
        array = array.reshape(tensor.shape if spec.reshape is None else leading + spec.reshape)
        inputs[tensor.name] = array
    return job_of(
        model, request, inputs, list(model.outputs) if outputs is None else outputs, batch_size
    )


_NUMPY = {name: spec.numpy for name, spec in datatypes.DATATYPES.items() if name != "BYTES"}
