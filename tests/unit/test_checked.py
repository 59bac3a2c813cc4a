"""Requests validated in a frontend (core/checked.py): the job the engine builds from the
mark is the job its own validation builds, and whatever the frontend cannot vouch for
(failures, unusual requests, a version since replaced) is validated by the engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import models
import numpy as np
import pytest
from engine_link import knows, linked

from inference import model_config_pb2 as mc
from service.cache import HASH_INLINE_BYTES, cache_key
from service.core import checked as checked_module
from service.core.checked import ModelSnapshot, checked_job, snapshot
from service.core.inference_server import InferenceServer
from service.core.lifecycle import ControlMode, ModelManager
from service.core.model import ModelVersion
from service.core.validation import prepare_job
from service.errors import InvalidArgument
from service.types import InferRequest, InputTensor, RequestedOutput

_RESHAPED = """name: "reshaped"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def _repository(root: Path) -> Path:
    models.write_model(
        root,
        "add_sub",
        models.add_sub_model("FP32", ["batch", 4]),
        models.make_config(
            "add_sub",
            [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
            [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
            max_batch_size=8,
        ),
    )
    models.write_model(root, "reshaped", models.identity_model("FP32", ["batch", 2, 2]), _RESHAPED)
    return root


@pytest.fixture
async def manager(tmp_path: Path) -> AsyncIterator[ModelManager]:
    manager = ModelManager([_repository(tmp_path)], mode=ControlMode.EXPLICIT)
    InferenceServer(manager)
    await manager.load("add_sub")
    await manager.load("reshaped")
    yield manager
    await manager.unload_all()


def _tensor(name: str, array: np.ndarray) -> InputTensor:
    return InputTensor(name, "FP32", array.shape, raw=array.tobytes())


def _add_sub(rows: int = 2, **changes: object) -> InferRequest:
    a = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    request = InferRequest(
        model_name="add_sub", id="r", inputs=[_tensor("INPUT0", a), _tensor("INPUT1", a + 1)]
    )
    for key, value in changes.items():
        setattr(request, key, value)
    return request


def _frontend(manager: ModelManager) -> ModelSnapshot:
    table = ModelSnapshot()
    table.update(snapshot(manager.loaded()))
    return table


async def test_the_checked_job_is_the_job_the_engine_would_build(manager: ModelManager) -> None:
    table = _frontend(manager)
    requests = [
        _add_sub(),
        _add_sub(outputs=[RequestedOutput("OUTPUT1")]),
        InferRequest(
            model_name="reshaped",
            model_version="1",
            inputs=[_tensor("INPUT0", np.arange(12, dtype=np.float32).reshape(3, 4))],
        ),
        # Parameters the server consumes and ones that reach the backend, classification.
        _add_sub(parameters={"priority": 2, "timeout": 5000, "sequence_id": 7, "note": "x"}),
        _add_sub(outputs=[RequestedOutput("OUTPUT0", {"classification": 1})]),
        _add_sub(outputs=[RequestedOutput("OUTPUT1", {"binary_data": True})]),
    ]
    fields = ("priority", "timeout_us", "correlation_id", "sequence_start", "sequence_end")
    for request in requests:
        checked = table.check(request)
        assert checked is not None, request
        model = manager.get(request.model_name, request.model_version)
        assert checked[0] == model.generation
        want = prepare_job(model, request)
        got = checked_job(model, request, checked)
        assert (got.batch_size, got.outputs, got.request_id) == (
            want.batch_size,
            want.outputs,
            want.request_id,
        )
        assert [getattr(got, f) for f in fields] == [getattr(want, f) for f in fields]
        assert got.parameters == want.parameters
        assert got.inputs.keys() == want.inputs.keys()
        for name, array in want.inputs.items():
            assert got.inputs[name].shape == array.shape and got.inputs[name].dtype == array.dtype
            np.testing.assert_array_equal(got.inputs[name], array)


async def test_what_the_frontend_cannot_vouch_for_is_left_to_the_engine(
    manager: ModelManager,
) -> None:
    table = _frontend(manager)
    bad_type = _add_sub()
    bad_type.inputs[0].datatype = "INT32"
    bad_shape = _add_sub()
    bad_shape.inputs[1].shape = (2, 5)
    unusual = [
        bad_type,  # fails: the engine refuses it, in its own config's words
        bad_shape,
        _add_sub(rows=9),  # over max_batch_size
        _add_sub(model_name="unknown"),
        _add_sub(model_version="7"),
        _add_sub(parameters={"priority": -1}),  # refused: in the engine's words
        _add_sub(outputs=[RequestedOutput("OUTPUT0", {"classification": 0})]),
        # Shared memory: only the engine holds the regions.
        _add_sub(outputs=[RequestedOutput("OUTPUT0", {"shared_memory_region": "r"})]),
    ]
    for request in unusual:
        assert table.check(request) is None, request


async def test_a_replaced_version_is_validated_again_by_the_engine(
    manager: ModelManager,
) -> None:
    """A frontend checked the request against the version it knew; the engine has since
    reloaded it (a new generation): the engine validates, so a request the new config
    refuses gets the refusal, with Triton's text."""
    core = InferenceServer(manager)
    stale = _frontend(manager)
    request = _add_sub(rows=2)
    checked = stale.check(request)
    assert checked is not None
    await manager.load(
        "add_sub",
        override=_config(manager, max_batch_size=1),
    )
    assert manager.get("add_sub").generation != checked[0]
    with pytest.raises(InvalidArgument, match="batch-size must be <= 1 for 'add_sub'"):
        core.start_infer(request, lambda response, error: None, checked)


def _config(manager: ModelManager, max_batch_size: int) -> object:
    config = type(manager.config("add_sub"))()
    config.CopyFrom(manager.config("add_sub"))
    config.max_batch_size = max_batch_size
    return config


async def test_frontends_follow_loads_and_unloads(manager: ModelManager) -> None:
    async with linked(InferenceServer(manager)) as client:
        assert await knows(client, _add_sub())
        response = await client.infer(_add_sub())
        assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
        await manager.unload("add_sub")
        for _ in range(200):
            if client.models.check(_add_sub()) is None:
                break
            await asyncio.sleep(0.01)
        assert client.models.check(_add_sub()) is None
        assert client.models.check(
            InferRequest(
                model_name="reshaped",
                inputs=[_tensor("INPUT0", np.ones((1, 4), np.float32))],
            )
        )


def test_only_models_whose_schedulers_take_checked_jobs_are_in_the_snapshot() -> None:
    """Sequence, decoupled and ensemble models validate in the engine's own paths: a
    frontend checking their requests would only do the work twice."""

    def version(name: str, **fields: object) -> ModelVersion:
        config = mc.ModelConfig(name=name, max_batch_size=8, **fields)  # type: ignore[arg-type]
        return ModelVersion(name, 1, config)

    table = snapshot(
        [
            version("plain"),
            version("sequence", sequence_batching=mc.ModelSequenceBatching()),
            version(
                "decoupled",
                model_transaction_policy=mc.ModelTransactionPolicy(decoupled=True),
            ),
            version("ensemble", platform="ensemble"),
        ]
    )
    assert list(table) == ["plain"]


async def test_the_frontend_computes_the_response_cache_key_of_small_inputs(
    manager: ModelManager,
) -> None:
    """For a model whose responses the engine caches, the frontend's mark carries the key
    the engine would compute; never when the engine has no cache, nor for inputs large
    enough that the engine hashes them in a thread."""
    loaded = manager.get("add_sub")
    config = type(loaded.config)()
    config.CopyFrom(loaded.config)
    config.response_cache.enable = True
    config.max_batch_size = 4096  # room for inputs over the frontend's hashing limit
    cached = ModelVersion("add_sub", loaded.version, config)
    cached.generation = loaded.generation
    request = _add_sub()
    job = prepare_job(loaded, request)
    want = cache_key("add_sub", loaded.version, job.inputs, job.outputs)
    for engine_caches, key in ((True, want), (False, None)):
        table = ModelSnapshot()
        table.update(snapshot([cached], engine_caches))
        checked = table.check(request)
        assert checked is not None and checked[3] == key
    table = ModelSnapshot()
    table.update(snapshot([cached], True))
    rows = HASH_INLINE_BYTES // 32 + 1  # two FP32 inputs of 4 values a row: over the limit
    big = table.check(_add_sub(rows=rows))
    assert big is not None and big[3] is None


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[InferRequest]:
    """Every request ``ModelSnapshot.mark`` runs ``prepare_job`` on."""
    calls: list[InferRequest] = []

    def counted(model: ModelVersion, request: InferRequest) -> object:
        calls.append(request)
        return prepare_job(model, request)

    monkeypatch.setattr(checked_module, "prepare_job", counted)
    return calls


async def test_a_request_like_one_that_passed_is_not_checked_again(
    manager: ModelManager, checks: list[InferRequest]
) -> None:
    """The same signature (names, datatypes, shapes, byte counts, outputs asked for) gets
    the mark the first request got, without ``prepare_job`` running again."""
    table = _frontend(manager)
    first = table.mark(_add_sub())
    again = table.mark(_add_sub(id="other"))
    assert first is not None and again == first and len(checks) == 1
    asked = table.mark(_add_sub(outputs=[RequestedOutput("OUTPUT1")]))
    assert asked is not None and asked[0][2] == ["OUTPUT1"] and len(checks) == 2


async def test_what_differs_from_a_request_that_passed_is_checked_in_full(
    manager: ModelManager, checks: list[InferRequest]
) -> None:
    """After a request passed, each variant the engine must refuse is still left to it:
    the memo holds only what the checks read, and only for requests without parameters."""
    table = _frontend(manager)
    passing = [_add_sub(), _add_sub(outputs=[RequestedOutput("OUTPUT0")])]
    assert all(table.check(request) is not None for request in passing)
    bad_type = _add_sub()
    bad_type.inputs[0].datatype = "INT32"
    short = _add_sub()
    short.inputs[1].raw = short.inputs[1].raw[:-4]  # type: ignore[index]
    renamed = _add_sub()
    renamed.inputs[1].name = "INPUT2"
    doubled = _add_sub()
    doubled.inputs[1].name = "INPUT0"
    region = _add_sub()
    region.inputs[0].parameters = {"shared_memory_region": "r"}
    variants = [
        bad_type,
        short,
        renamed,
        doubled,
        _add_sub(parameters={"priority": -1}),
        _add_sub(outputs=[RequestedOutput("OUTPUT0", {"classification": 0})]),
        _add_sub(outputs=[RequestedOutput("OUTPUT9")]),
    ]
    shared_memory = [
        region,
        _add_sub(outputs=[RequestedOutput("OUTPUT0", {"shared_memory_region": "r"})]),
    ]
    for request in variants + shared_memory:
        assert table.check(request) is None, request
    # Each variant was checked in full (shared memory is left to the engine unchecked);
    # the passing requests, asked again, were not.
    assert checks == passing + variants
    assert all(table.check(request) is not None for request in passing)
    assert checks == passing + variants


async def test_a_reload_forgets_what_passed_against_the_old_version(
    manager: ModelManager, checks: list[InferRequest]
) -> None:
    table = _frontend(manager)
    assert table.check(_add_sub(rows=2)) is not None
    assert table.check(_add_sub(rows=2)) is not None and len(checks) == 1  # remembered
    await manager.load("add_sub", override=_config(manager, max_batch_size=1))
    table.update(snapshot(manager.loaded()))
    assert table.check(_add_sub(rows=2)) is None  # over the new max_batch_size
    assert len(checks) == 2
