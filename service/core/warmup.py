"""Model warmup (``model_warmup``): samples every instance runs before the version is READY.

Triton's core builds each sample's requests once per instance (``GenerateWarmupData``):
``batch_size`` requests of one row each, with zero, random or file data (a file under the
model's ``warmup/`` folder), checked as a client's request would be; then the instance
executes them together, ``count`` times (``WarmUp``), bypassing the scheduler. A sample
whose response carries an error fails the load, with Triton's text listing every
request's error. Warmup executions are the model's statistics, as in Triton (its
backends report them like any other).

Everything here blocks and runs in the loader's thread, before the scheduler exists.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inference import model_config_pb2 as mc
from wire import datatypes

from ..backends.base import BackendRequest, ModelInstance, RequestInstance
from ..errors import Internal, InvalidArgument, ServerError, request_prefix, status_text
from ..scheduling.base import Job
from ..scheduling.batch import execute_batch, takes_requests
from ..scheduling.batch_io import BatchIO
from ..statistics import BatchTimings
from ..types import InferRequest, InputTensor, ParameterValue
from .model import ModelVersion
from .validation import prepare_job

__all__ = ["WarmupFailed", "WarmupSample", "warm_up", "warmup_samples"]

log = logging.getLogger(__name__)

#: Triton reads sample files from this folder of the model's directory.
WARMUP_FOLDER = "warmup"
_DATA = mc.ModelWarmup.Input


class WarmupFailed(ValueError):
    """A sample could not be built or failed to run: the version's UNAVAILABLE reason,
    written as Triton's status (``Invalid argument: ...``)."""


@dataclass(frozen=True)
class WarmupSample:
    name: str
    count: int
    requests: list[Job]  # ``batch_size`` requests of one row each


def warmup_samples(model: ModelVersion, model_dir: Path) -> list[WarmupSample]:
    """The configured samples as jobs, built and checked as Triton does (its texts);
    WarmupFailed names the first fault."""
    samples = []
    for setting in model.config.model_warmup:
        if setting.batch_size == 0:
            log.debug("Skipping batch 0 warmup sample '%s'", setting.name, extra={"verbose": 1})
            continue
        log.debug("Generating warmup sample data for '%s'", setting.name, extra={"verbose": 1})
        for name, given in setting.inputs.items():  # Triton's first pass: sizes only
            if any(d < 0 for d in given.dims):
                raise WarmupFailed(
                    status_text(
                        InvalidArgument(
                            "warmup setting expects all variable-size dimensions are "
                            f"specified for input '{name}'"
                        )
                    )
                )
        try:
            requests = [_request(model, setting, model_dir) for _ in range(setting.batch_size)]
        except ServerError as exc:
            raise WarmupFailed(status_text(exc)) from None
        samples.append(WarmupSample(setting.name, max(setting.count, 1), requests))
    return samples


def _request(model: ModelVersion, setting: mc.ModelWarmup, model_dir: Path) -> Job:
    """One request of a sample: the model's own inputs are checked as a client's; the
    others (a sequence model's control inputs) are added as they are, as Triton's
    override inputs."""
    originals: list[InputTensor] = []
    overrides: dict[str, InputTensor] = {}
    for name, given in setting.inputs.items():
        datatype = datatypes.datatype_from_config(mc.DataType.Name(given.data_type))
        shape = ((1,) if model.batched else ()) + tuple(given.dims)
        tensor = InputTensor(name, datatype, shape, raw=_data(name, given, datatype, model_dir))
        if name in model.inputs:
            originals.append(tensor)
        else:
            overrides[name] = tensor
    job = prepare_job(model, InferRequest(model.name, inputs=originals))
    for name, tensor in overrides.items():
        job.inputs[name] = _array(tensor)
    return job


def _data(name: str, given: mc.ModelWarmup.Input, datatype: str, model_dir: Path) -> bytes:
    """The bytes of one row of ``given``. STRING random data is zeros (empty strings), as
    in Triton, whose STRING elements carry a length prefix."""
    count = datatypes.element_count(given.dims)
    size = count * (datatypes.DATATYPES[datatype].itemsize or 4)
    which = given.WhichOneof("input_data_type")
    if which == "zero_data" or (which == "random_data" and datatype == "BYTES"):
        return bytes(size)
    if which == "random_data":
        return np.random.default_rng().bytes(size)
    if which == "input_data_file":
        path = model_dir / WARMUP_FOLDER / given.input_data_file
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise Internal(
                f"failed to open text file for read {path}: {os.strerror(exc.errno or 0)}"
            ) from None
        if datatype == "BYTES":
            return data
        if len(data) < size:  # Triton's text, its missing space included
            raise InvalidArgument(
                f"{request_prefix('')}warmup setting expects {size} bytes, but the data "
                f"provided from {given.input_data_file}only has {len(data)} bytes"
            )
        return data[:size]
    raise InvalidArgument(
        f"{request_prefix('')}warmup setting expects input '{name}' to have input_data_type set"
    )


def _array(tensor: InputTensor) -> np.ndarray:
    assert tensor.raw is not None
    count = datatypes.element_count(tensor.shape)
    if tensor.datatype == "BYTES":
        try:
            flat = datatypes.deserialize_bytes_tensor(tensor.raw, count)
        except ValueError as exc:
            raise InvalidArgument(f"warmup input '{tensor.name}': {exc}") from None
        return flat.reshape(tensor.shape)
    dtype = datatypes.DATATYPES[tensor.datatype].numpy
    return np.frombuffer(tensor.raw, dtype=dtype, count=count).reshape(tensor.shape).copy()


def warm_up(
    model: ModelVersion,
    instances: Sequence[ModelInstance | RequestInstance],
    samples: Sequence[WarmupSample],
) -> None:
    """Run every sample on every instance, the instances in parallel as Triton's backend
    threads do; WarmupFailed (the first instance's, in order) when a sample fails."""
    if not samples or not instances:
        return
    with ThreadPoolExecutor(len(instances)) as pool:
        futures = [pool.submit(_warm_instance, model, i, samples) for i in instances]
    for future in futures:
        future.result()


def _warm_instance(
    model: ModelVersion, instance: ModelInstance | RequestInstance, samples: Sequence[WarmupSample]
) -> None:
    label = instance.spec.name
    for sample in samples:
        for iteration in range(1, sample.count + 1):
            log.debug(
                "model '%s' instance %s is running warmup sample '%s' for iteration %d",
                model.name,
                label,
                sample.name,
                iteration,
                extra={"verbose": 1},
            )
            errors = _run(model, instance, sample.requests)
            if errors:
                log.debug(
                    "model '%s' instance %s failed to run warmup sample '%s'",
                    model.name,
                    label,
                    sample.name,
                    extra={"verbose": 1},
                )
                listed = "".join(f"{error}; " for error in errors)
                raise WarmupFailed(
                    status_text(
                        InvalidArgument(f"failed to run warmup sample '{sample.name}': {listed}")
                    )
                )


def _run(
    model: ModelVersion, instance: ModelInstance | RequestInstance, jobs: list[Job]
) -> list[str]:
    """One execution of a sample's requests; the error of each request that failed."""
    limit = model.config.max_batch_size
    total = sum(job.size for job in jobs)
    if total != 1 and total > limit:
        # What Triton's backends answer to more rows than the model takes (the python
        # backend's text), for each request.
        return [f"batch size {total} for '{instance.spec.name}', max allowed is {limit}"] * len(
            jobs
        )
    if model.config.model_transaction_policy.decoupled and takes_requests(instance):
        errors, timings = _run_decoupled(instance, jobs)
    else:
        try:
            outputs, timings = execute_batch(instance, jobs, io=BatchIO.of(model.config))
        except Exception as exc:
            return [_message(exc)] * len(jobs)
        errors = [o.message for o in outputs if isinstance(o, ServerError)]
    if not errors:
        model.stats.record_execution(total, timings)
        for job in jobs:
            model.stats.record_success(timings.end - timings.start, 0, timings, job.size)
    return errors


class _FinalSender:
    """A decoupled request's sender during warmup: the errors it carried, and whether
    the final flag came (the model may send it from its own thread, later)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.done = threading.Event()

    def send(
        self,
        outputs: Mapping[str, np.ndarray] | None = None,
        error: str | ServerError | None = None,
        final: bool = False,
        parameters: Mapping[str, ParameterValue] | None = None,
    ) -> None:
        if error is not None:
            self.errors.append(_message(error))
        if final:
            self.done.set()

    @property
    def cancelled(self) -> bool:
        return False


def _run_decoupled(instance: RequestInstance, jobs: list[Job]) -> tuple[list[str], BatchTimings]:
    """As Triton's warmup, wait for each request's final response; every error any
    response carried."""
    start = time.monotonic_ns()
    senders = [_FinalSender() for _ in jobs]
    requests = [BackendRequest(inputs=j.inputs, requested_outputs=list(j.outputs)) for j in jobs]
    input_end = time.monotonic_ns()
    instance.execute_requests(requests, senders)
    infer_end = time.monotonic_ns()
    for sender in senders:
        sender.done.wait()
    errors = [error for sender in senders for error in sender.errors]
    return errors, BatchTimings(start, input_end, infer_end, time.monotonic_ns())


def _message(error: BaseException | str) -> str:
    if isinstance(error, ServerError):
        return error.message
    return str(error)
