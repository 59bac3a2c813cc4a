"""InferenceServer: the one API every protocol handler talks to."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from inference import model_config_pb2 as mc

from .. import SERVER_ID, __version__
from ..admission import Admission
from ..cache import ResponseCache, cache_key, small_key
from ..errors import (
    ServerError,
    Unavailable,
    Unimplemented,
    request_prefix,
)
from ..scheduling.base import Enqueuing, ExecutionResult, Job, SequenceHolder
from ..scheduling.ensemble import StepRunner
from ..scheduling.inflight import InFlight
from ..shm import (
    CudaRegionStatus,
    SharedMemoryRegistry,
    SystemRegionStatus,
    bind_request,
    uses_shared_memory,
)
from ..shm.registry import CUDA, SYSTEM
from ..statistics import ModelStats
from ..types import ExecutionRecord, InferRequest, InferResponse, TensorSpec
from .checked import Checked, Snapshot, checked_job, snapshot
from .classification import requested_classes
from .decoupled import ENABLE_EMPTY_FINAL, stream_responses
from .index import IndexEntry
from .lifecycle import ModelManager
from .model import ModelVersion
from .shaping import shape_outputs
from .unary import (
    Answered,
    UnaryCall,
    answer,
    count_failure,
    count_unary_failure,
    response_of,
)
from .validation import build_outputs, prepare_job

__all__ = [
    "EXTENSIONS",
    "STOPPING",
    "InferenceServer",
    "ModelMetadata",
    "ServerMetadata",
    "VersionStats",
]

# Only what is actually implemented (Triton's extension names, in its order).
# binary_tensor_data is the REST gateway's; parameters: request parameters reach the
# models. cuda_shared_memory is advertised without a GPU too, as Triton's GPU build does
# (registration then fails with its "invalid args").
EXTENSIONS: tuple[str, ...] = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
)


_SEQUENCE_POLL_S = 0.05  # how often a shutdown looks whether the sequences have ended

#: Triton's answer to an inference request while the server stops (its schedulers').
STOPPING = "Server is stopping, scheduler for model has stopped accepting new inference requests"


@dataclass(frozen=True)
class ServerMetadata:
    name: str
    version: str
    extensions: tuple[str, ...]


@dataclass(frozen=True)
class ModelMetadata:
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]


@dataclass(frozen=True)
class VersionStats:
    name: str
    version: int
    stats: ModelStats


class InferenceServer:
    def __init__(
        self,
        models: ModelManager,
        *,
        strict_readiness: bool = True,
        cache: ResponseCache | None = None,
        server_id: str = SERVER_ID,
        shared_memory: SharedMemoryRegistry | None = None,
        admission: Admission | None = None,
    ) -> None:
        """``admission``: the refusal flags, shared with the process that takes the stop
        signal (``admission.py``); this server's own when not given."""
        self._models = models
        self._shm = shared_memory if shared_memory is not None else SharedMemoryRegistry()
        self._id = server_id
        self._strict = strict_readiness
        self._cache = cache
        # New stream requests refused from ``stop_accepting``, new unary ones from
        # ``refuse_new``; or both from the signal on (``Admission.signalled``).
        self._admission = admission if admission is not None else Admission()
        self._inflight = InFlight()

    def stop_accepting(self) -> None:
        """Shutdown begins: readiness is false and new requests on open streams are
        refused with Triton's STOPPING, except those that continue a sequence in progress.
        Unary inferences are still served until ``refuse_new`` (at once, unless
        --lame-duck-secs): the frontend has closed its listener, so one that still arrives
        was sent on an open connection before its client could know (a balancer's kept
        connection), and refusing it would fail a request the balancer could not send
        elsewhere."""
        self._admission.refuse_streams()

    def refuse_new(self) -> None:
        """The lame duck is over: new unary inferences are refused too, as Triton refuses
        them while it stops, except those that continue a sequence in progress. The steps
        of ensembles in flight still run (``step_runner``)."""
        self._admission.refuse_all()

    async def drain(self, seconds: float) -> bool:
        """Wait up to ``seconds`` until no inference is in flight and no sequence is in
        progress (its remaining requests still come in); False when some work is left.
        Nothing left is True at once, even with 0 seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while True:
            if self._inflight.count:
                try:
                    await asyncio.wait_for(self._inflight.drained(), deadline - loop.time())
                except TimeoutError:
                    return False
            if not self._active_sequences():
                if not self._inflight.count:
                    return True
                continue
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(min(_SEQUENCE_POLL_S, deadline - loop.time()))

    def _active_sequences(self) -> int:
        count = 0
        for model in self._models.loaded():
            scheduler = model.scheduler
            if isinstance(scheduler, SequenceHolder):
                count += scheduler.active_sequences()
        return count

    def is_live(self) -> bool:
        return True

    def is_ready(self) -> bool:
        if self._admission.streams_refused:
            return False
        return self._models.all_ready() if self._strict else True

    def metadata(self) -> ServerMetadata:
        return ServerMetadata(self._id, __version__, EXTENSIONS)

    def model_ready(self, name: str, version: str = "") -> bool:
        return self._models.find(name, version) is not None

    def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        model = self._models.get(name, version)
        return ModelMetadata(
            name=model.name,
            versions=[str(v) for v in self._models.ready_versions(name)],
            platform=model.config.platform or model.config.backend,
            inputs=model.metadata_inputs(),
            outputs=model.metadata_outputs(),
        )

    def model_config(self, name: str, version: str = "") -> mc.ModelConfig:
        return self._models.config(name, version)

    def model_labels(self, name: str, version: str = "") -> dict[str, tuple[str, ...]]:
        """Classification labels by output name (outputs with a ``label_filename``)."""
        return self._models.get(name, version).labels

    def repository_index(self, repository_name: str = "", ready: bool = False) -> list[IndexEntry]:
        return self._models.index(repository_name, ready)

    async def load_model(
        self,
        name: str,
        override: mc.ModelConfig | None = None,
        files: dict[str, bytes] | None = None,
    ) -> None:
        await self._models.load(name, override, files)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        await self._models.unload(name, unload_dependents)

    def model_statistics(self, name: str = "", version: str = "") -> list[VersionStats]:
        return [
            VersionStats(m.name, m.version, m.stats) for m in self._models.loaded(name, version)
        ]

    # Shared memory (the regions are mapped here, where the tensor bytes are consumed).

    def system_shared_memory_status(self, name: str = "") -> list[SystemRegionStatus]:
        return self._shm.system_status(name)

    def register_system_shared_memory(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None:
        self._shm.register_system(name, key, offset, byte_size)

    def unregister_system_shared_memory(self, name: str = "") -> None:
        self._shm.unregister(SYSTEM, name)

    def cuda_shared_memory_status(self, name: str = "") -> list[CudaRegionStatus]:
        return self._shm.cuda_status(name)

    def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        self._shm.register_cuda(name, raw_handle, device_id, byte_size)

    def unregister_cuda_shared_memory(self, name: str = "") -> None:
        self._shm.unregister(CUDA, name)

    def close_shared_memory(self) -> None:
        """Server stop: unmap every region (as Triton's manager does when destroyed)."""
        self._shm.close()

    def _lookup(self, request: InferRequest) -> ModelVersion:
        # Like Triton, a request for an unknown model fails before it becomes a request:
        # no id prefix on those errors.
        if request.model_namespace is None:  # a client's request (an ensemble step's has one)
            return self._models.get(request.model_name, request.model_version)
        return self._models.get(request.model_name, request.model_version, request.model_namespace)

    def _admit_while_stopping(self, request: InferRequest) -> None:
        """Shutdown: only a request that continues a sequence in progress still gets in
        (Triton refuses new sequences and everything else, and lets those finish)."""
        try:
            model: ModelVersion | None = self._lookup(request)
        except ServerError:
            if not self._models.was_served(request.model_name):
                return  # refused as a request for an unknown model, as Triton refuses it
            # Retired by this stop: Triton keeps its models loaded until the stop's end,
            # so there its scheduler refuses the request.
            model = None
        cid = request.parameters.get("sequence_id")
        if (
            model is not None
            and isinstance(cid, int | str)
            and not isinstance(cid, bool)
            and request.parameters.get("sequence_start") is not True
        ):
            scheduler = model.scheduler
            if isinstance(scheduler, SequenceHolder) and scheduler.continues_sequence(cid):
                return
        # Triton's text (the scheduler's Enqueue: ``LogRequest()`` + STOPPING); an
        # ensemble's own scheduler never stops, so there its first step is refused, and the
        # ensemble names itself as for any failed step.
        refusal = request_prefix(request.id) + STOPPING
        if model is not None and model.config.platform == "ensemble":
            refusal = f"in ensemble '{model.name}', {refusal}"
        raise Unavailable(refusal)

    @property
    def step_runner(self) -> StepRunner:
        """The ensembles' StepRunner: the steps of a request already in flight run on
        during a drain, when a client's stream request would be refused."""
        return _Steps(self)

    def stream_infer(
        self, request: InferRequest, record: ExecutionRecord | None = None
    ) -> AsyncIterator[InferResponse]:
        """Every response for ``request`` of a stream: one for ordinary models, zero or
        more for decoupled ones (each marked with ``triton_final_response``).

        ``record`` (traced streams only) receives the execution's timings; with it the
        stream ends only once the model's ``execute`` has returned, not just at the final
        response, so that a trace's compute spans lie within its request span.
        """
        if self._admission.streams_refused:
            self._admit_while_stopping(request)
        return self._responses(request, record)

    async def _responses(
        self, request: InferRequest, record: ExecutionRecord | None
    ) -> AsyncIterator[InferResponse]:
        model = self._lookup(request)
        if not model.config.model_transaction_policy.decoupled:
            response = await self._infer(request)
            if record is not None:
                record.result = response.timings
            yield response
            return
        start = time.monotonic_ns()
        with self._inflight, model.lease():
            regions = None
            if uses_shared_memory(request):
                request, regions = await bind_request(self._shm, model.name, request)
            try:
                job = prepare_job(model, request)
                enable = request.parameters.get(ENABLE_EMPTY_FINAL, False) is True
                outcome = _DecoupledOutcome(model, start, job.size)
                classes = requested_classes(request) if request.outputs else None
                try:
                    async for response in stream_responses(
                        model, job, request.id, enable, record, outcome.executed, classes
                    ):
                        if regions is not None:
                            response.outputs = await regions.write_outputs(response.outputs)
                        yield response
                except ServerError as exc:
                    if exc.is_response:  # the model's own error response: Triton counts
                        outcome.answered()  # its request a success (checked on 2.51)
                    else:
                        count_failure(model, exc, start, job.size)
                    raise
                except (asyncio.CancelledError, GeneratorExit):  # the caller left mid-stream
                    model.stats.record_cancelled(time.monotonic_ns() - start, job.size)
                    raise
                outcome.answered()
            finally:
                if regions is not None:
                    regions.release()

    async def infer(
        self, request: InferRequest, checked: Checked | None = None, leave_shaping: bool = False
    ) -> InferResponse:
        """One request, one response. A decoupled model is refused, as Triton's ModelInfer
        refuses it: its responses need a stream. ``checked``: as for ``start_infer``;
        ``leave_shaping``: the response of a request checked against the version that
        ran it is left ``unshaped`` for the frontend that checked it (core/shaping.py),
        as ``start_infer`` leaves it (the engine passes False where it must read the
        outputs itself: a trace records them)."""
        if self._admission.unary_refused:
            self._admit_while_stopping(request)
        return await self._infer(request, checked, leave_shaping)

    def watch_models(self, changed: Callable[[], None]) -> None:
        """``changed`` is called whenever the loaded versions may have changed."""
        self._models.on_change = changed

    def models_snapshot(self) -> Snapshot:
        """The ready versions as frontends validate requests against them."""
        return snapshot(self._models.loaded(), self._cache is not None)

    def start_infer(
        self, request: InferRequest, answered: Answered, checked: Checked | None = None
    ) -> UnaryCall | None:
        """``infer`` without a task, for the engine's frame handler: the request is
        checked and handed to its scheduler now, and ``answered`` gets its response or
        error from a callback (core/unary.py). A refusal raises here, as ``infer`` raises
        it. None: the request needs ``infer`` itself (shared memory, the response cache,
        a sequence or ensemble scheduler). A request its scheduler ran at once (on the
        loop's thread) is answered before this returns (the call is ``settled``).
        ``checked``: a frontend validated it (core/checked.py); against this very
        version, only its job is built here, and the response is left ``unshaped`` for
        that frontend (core/shaping.py)."""
        if self._admission.unary_refused:
            self._admit_while_stopping(request)
        start = time.monotonic_ns()
        model = self._unary_model(request)
        scheduler = model.scheduler
        if (
            not isinstance(scheduler, Enqueuing)
            or (self._cache is not None and model.config.response_cache.enable)
            or uses_shared_memory(request)
        ):
            return None
        job, _, marked = self._job(model, request, checked)
        try:
            future = scheduler.enqueue(job)
        except ServerError as exc:
            count_unary_failure(model, exc, start, job.size)
            raise
        call = UnaryCall(
            self._inflight, model, scheduler, request, job, start, answered, not marked
        )
        if future.done():  # executed on the loop's thread already (scheduling/inline.py)
            call.finished(future)  # answered now, not from a callback a turn later
        else:
            future.add_done_callback(call.finished)
        return call

    def _unary_model(self, request: InferRequest) -> ModelVersion:
        """The version a unary request goes to; a decoupled model is refused, as Triton's
        ModelInfer refuses it: its responses need a stream."""
        model = self._lookup(request)
        decoupled = model.decoupled
        if decoupled is None:
            decoupled = model.decoupled = model.config.model_transaction_policy.decoupled
        if decoupled:
            raise Unimplemented(
                "ModelInfer RPC doesn't support models with decoupled transaction policy"
            )
        return model

    async def _infer(
        self, request: InferRequest, checked: Checked | None = None, leave_shaping: bool = False
    ) -> InferResponse:
        """``infer`` awaited in a task: in one process (``--frontends 0``), and in the
        engine for what ``start_infer`` leaves to it."""
        start = time.monotonic_ns()
        model = self._unary_model(request)
        with self._inflight, model.lease():
            if uses_shared_memory(request):
                return await self._infer_shm(model, request, start)
            job, key, marked = self._job(model, request, checked)
            shape = not (leave_shaping and marked)
            return await self._execute(model, job, start, request, key, shape)

    @staticmethod
    def _job(
        model: ModelVersion, request: InferRequest, checked: Checked | None
    ) -> tuple[Job, bytes | None, bool]:
        """The request's job, built from a frontend's mark when it was checked against
        this very version (core/checked.py) and validated here otherwise (not checked,
        or against a version since replaced); the response cache key the frontend
        computed, if it did; and whether the mark was used (only then may the frontend
        shape the outputs: it holds that very version)."""
        if checked is not None and checked[0] == model.generation:
            return checked_job(model, request, checked), checked[3], True
        return prepare_job(model, request), None, False

    async def _infer_shm(
        self, model: ModelVersion, request: InferRequest, start: int
    ) -> InferResponse:
        """``infer`` for a request with tensors in shared memory: its regions are held
        from before validation until its outputs are written into them."""
        request, regions = await bind_request(self._shm, model.name, request)
        try:
            response = await self._execute(model, prepare_job(model, request), start, request)
            response.outputs = await regions.write_outputs(response.outputs)
            return response
        finally:
            regions.release()

    async def _execute(
        self,
        model: ModelVersion,
        job: Job,
        start: int,
        request: InferRequest,
        key: bytes | None = None,
        shape: bool = True,
    ) -> InferResponse:
        """A validated unary request's execution (or cached answer), counted. ``key``:
        its response cache key, when a frontend computed it; ``shape``: as for
        ``unary.answer`` (the cache holds reshaped outputs, which shaping leaves as they
        are, so a frontend only classifies those)."""
        try:
            if self._cache is not None and model.config.response_cache.enable:
                response = await self._run_cached(model, job, start, request.id, key)
                if shape:
                    response.outputs = shape_outputs(model, request, response.outputs)
                else:
                    response.unshaped = True
                return response
            assert model.scheduler is not None  # guaranteed by ModelManager.get
            result = await model.scheduler.submit(job)
            return answer(model, job, request, result, start, shape)
        except ServerError as exc:
            count_unary_failure(model, exc, start, job.size)
            raise

    async def _run_cached(
        self, model: ModelVersion, job: Job, start: int, request_id: str, key: bytes | None
    ) -> InferResponse:
        """Answer ``job`` from the response cache, or execute it and store its outputs."""
        assert model.scheduler is not None and self._cache is not None
        cache = self._cache
        lookup = time.monotonic_ns()
        if key is None:
            try:
                key = await self._key(model, job)
            except asyncio.CancelledError:  # the caller left before the scheduler had it
                model.stats.record_cancelled(time.monotonic_ns() - start, job.size)
                raise
        cached = cache.get(key)
        looked_up = time.monotonic_ns()
        if cached is not None:
            model.stats.record_cache_hit(looked_up - start, looked_up - lookup, job.size)
            return response_of(model, request_id, cached, None)
        result = await model.scheduler.submit(job)
        outputs = build_outputs(model, job, result.outputs)
        insert = time.monotonic_ns()
        cache.put(key, outputs)
        now = time.monotonic_ns()
        model.stats.record_cache_miss((looked_up - lookup) + (now - insert))
        model.stats.record_success(now - start, result.queue_ns, result.timings, job.size)
        return response_of(model, request_id, outputs, result)

    @staticmethod
    async def _key(model: ModelVersion, job: Job) -> bytes:
        """Hash on the loop for small inputs, in a thread for large ones (never block)."""
        key = small_key(model.name, model.version, job.inputs, job.outputs)
        if key is not None:
            return key
        return await asyncio.to_thread(
            cache_key, model.name, model.version, job.inputs, job.outputs
        )


class _DecoupledOutcome:
    """Counts a decoupled request's success once both its final response has gone out
    and its execution's timings are known, whichever comes last (a model may send its
    final response from ``execute`` or long after it returned)."""

    __slots__ = ("_done", "_inferences", "_model", "_result", "_start")

    def __init__(self, model: ModelVersion, start: int, inferences: int = 1) -> None:
        self._model = model
        self._start = start
        self._inferences = inferences
        self._done = False
        self._result: ExecutionResult | None = None

    def executed(self, result: ExecutionResult) -> None:
        self._result = result
        if self._done:
            self._record()

    def answered(self) -> None:
        self._done = True
        if self._result is not None:
            self._record()

    def _record(self) -> None:
        result = self._result
        assert result is not None
        elapsed = time.monotonic_ns() - self._start
        self._model.stats.record_request_success(
            elapsed, result.queue_ns, result.timings, self._inferences
        )


class _Steps:
    """``InferenceServer.step_runner``."""

    def __init__(self, core: InferenceServer) -> None:
        self._core = core

    def stream_infer(
        self, request: InferRequest, record: ExecutionRecord | None = None
    ) -> AsyncIterator[InferResponse]:
        return self._core._responses(request, record)
