"""Output shaping in the frontends (core/shaping.py): for a request a frontend checked, the
engine sends the backend's arrays and the frontend reshapes and classifies them with the
version it checked against. Every response must be byte for byte the one the engine's
own shaping gives (the one-process layout), and a reload between the check and the
answer must be honoured: the engine shapes a request checked against a replaced version
itself, and a frontend shapes with the version that ran, not the one it holds now."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import models
import numpy as np
import pytest
from engine_link import knows, linked

from service.cache import ResponseCache
from service.core.checked import ModelSnapshot, snapshot
from service.core.inference_server import InferenceServer
from service.core.lifecycle import ControlMode, ModelManager
from service.core.model import ModelVersion
from service.core.shaping import shape_outputs
from service.errors import Internal
from service.frontend import client as client_module
from service.grpc_frontend.codec import encode_infer_response
from service.scheduling.base import ExecutionResult
from service.types import InferRequest, InferResponse, InputTensor, OutputTensor, RequestedOutput

_MAX_BYTES = 1 << 24


def _config(name: str, batched: bool, output: str, labels: bool) -> str:
    """Backend tensors [2, 3] (batch first when batched), seen by clients as [6]."""
    label = ' label_filename: "labels.txt"' if labels else ""
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {8 if batched else 0}\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 6 ] '
        "reshape { shape: [ 2, 3 ] } } ]\n"
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 {output}{label} }} ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )


_RESHAPED = "dims: [ 6 ] reshape { shape: [ 2, 3 ] }"


def _repository(root: Path) -> Path:
    for name, batched, labels in (
        ("batched", True, True),
        ("plain", False, True),
        ("unlabelled", True, False),
    ):
        dims: list[int | str] = ["batch", 2, 3] if batched else [2, 3]
        directory = models.write_model(
            root,
            name,
            models.identity_model("FP32", dims),
            _config(name, batched, _RESHAPED, labels),
        )
        (directory / "labels.txt").write_text("\n".join(f"class-{i}" for i in range(6)))
    return root


@pytest.fixture
async def manager(tmp_path: Path) -> AsyncIterator[ModelManager]:
    manager = ModelManager([_repository(tmp_path)], mode=ControlMode.EXPLICIT)
    InferenceServer(manager)
    for name in ("batched", "plain", "unlabelled"):
        await manager.load(name)
    yield manager
    await manager.unload_all()


def _request(model: str, rows: int | None, classes: int | None = None) -> InferRequest:
    shape = (6,) if rows is None else (rows, 6)
    values = np.array([3, 1, 4, 1, 5, 9] * (rows or 1), dtype=np.float32).reshape(shape)
    outputs = [] if classes is None else [RequestedOutput("OUTPUT0", {"classification": classes})]
    return InferRequest(
        model_name=model,
        id="r",
        inputs=[InputTensor("INPUT0", "FP32", shape, raw=values.tobytes())],
        outputs=outputs,
    )


_REQUESTS = [
    _request("batched", 2),  # reshape only
    _request("batched", 2, classes=3),  # batched, with labels
    _request("plain", None),
    _request("plain", None, classes=4),  # unbatched, with labels
    _request("unlabelled", 1, classes=2),  # batched, no labels
    _request("unlabelled", 3, classes=9),  # more classes than there are
]


def _wire(response: InferResponse) -> bytes:
    return encode_infer_response(response, _MAX_BYTES).SerializeToString()


def _frontend(manager: ModelManager) -> ModelSnapshot:
    table = ModelSnapshot()
    table.update(snapshot(manager.loaded()))
    return table


async def _started(core: InferenceServer, request: InferRequest, checked: object) -> InferResponse:
    """The engine's answer to a request started as its frame handler starts it."""
    done: asyncio.Future[InferResponse] = asyncio.get_running_loop().create_future()

    def answered(response: InferResponse | None, error: BaseException | None) -> None:
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(response)  # type: ignore[arg-type]

    call = core.start_infer(request, answered, checked)  # type: ignore[arg-type]
    assert call is not None
    return await done


async def test_the_engine_leaves_a_checked_requests_outputs_as_the_backend_made_them(
    manager: ModelManager,
) -> None:
    core = InferenceServer(manager)
    table = _frontend(manager)
    for request in _REQUESTS:
        mark = table.mark(request)
        assert mark is not None, request
        raw = await _started(core, request, mark[0])
        assert raw.unshaped
        (output,) = raw.outputs
        assert output.datatype == "FP32"
        assert output.array.shape[-2:] == (2, 3)  # the backend's shape
        shaped = await core.infer(request)  # the engine's own shaping: one process
        assert not shaped.unshaped
        raw.outputs = shape_outputs(mark[1], request, raw.outputs)
        raw.unshaped = False
        assert _wire(raw) == _wire(shaped), request


async def test_a_frontends_responses_are_the_engines_byte_for_byte(
    manager: ModelManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the real channel: the frontend shapes what the engine sent unshaped."""
    shaped: list[str] = []

    def shaping(model: ModelVersion, request: InferRequest, outputs: list[OutputTensor]) -> Any:
        shaped.append(request.model_name)
        return shape_outputs(model, request, outputs)

    monkeypatch.setattr(client_module, "shape_outputs", shaping)
    core = InferenceServer(manager)
    async with linked(core) as client:
        assert await knows(client, _REQUESTS[-1])
        for request in _REQUESTS:
            assert client.models.check(request) is not None
            got = await client.infer(request)
            assert not got.unshaped
            assert _wire(got) == _wire(await core.infer(request)), request
        assert shaped == [r.model_name for r in _REQUESTS]  # all of them, in the frontend
        text = _wire(await client.infer(_REQUESTS[1]))
        assert b"9.000000:5:class-5" in text and b"5.000000:4:class-4" in text


async def test_a_reload_between_check_and_answer_is_shaped_by_the_engine(
    manager: ModelManager, tmp_path: Path
) -> None:
    """Checked against a version the engine has since replaced (new labels, no reshape):
    the engine validates the request again and shapes the response with what it loaded."""
    core = InferenceServer(manager)
    request = _request("batched", 1, classes=2)
    stale = _frontend(manager).mark(request)
    assert stale is not None
    (tmp_path / "batched" / "labels.txt").write_text("\n".join(f"new-{i}" for i in range(6)))
    await manager.load("batched")
    response = await _started(core, request, stale[0])
    assert not response.unshaped
    assert list(response.outputs[0].array.ravel()) == [b"9.000000:5:new-5", b"5.000000:4:new-4"]
    assert _wire(response) == _wire(await core.infer(request))

    (tmp_path / "batched" / "config.pbtxt").write_text(
        _config("batched", True, "dims: [ 2, 3 ]", True)
    )
    plain = _request("batched", 1)
    stale = _frontend(manager).mark(plain)
    assert stale is not None
    await manager.load("batched")
    response = await _started(core, plain, stale[0])
    assert not response.unshaped
    assert response.outputs[0].array.shape == (1, 2, 3)  # the new config has no reshape


async def test_a_frontend_shapes_with_the_version_that_ran_even_once_replaced(
    manager: ModelManager, tmp_path: Path
) -> None:
    """The engine ran the version checked against; a reload reaches the frontend before
    the answer does: the frontend shapes with the version it checked against (the one
    that ran), not the one its snapshot now holds."""
    core = InferenceServer(manager)
    table = _frontend(manager)
    request = _request("batched", 2, classes=2)
    mark = table.mark(request)
    assert mark is not None
    want = _wire(await core.infer(request))
    raw = await _started(core, request, mark[0])
    assert raw.unshaped
    (tmp_path / "batched" / "labels.txt").write_text("renamed\n" * 6)
    await manager.load("batched")
    table.update(snapshot(manager.loaded()))
    now = table.mark(request)
    assert now is not None and now[1].labels["OUTPUT0"][0] == "renamed"
    raw.outputs = shape_outputs(mark[1], request, raw.outputs)
    raw.unshaped = False
    assert _wire(raw) == want


async def test_cached_responses_are_classified_in_the_frontend(
    manager: ModelManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The response cache holds reshaped outputs (the engine's own requests read them as
    they are); for a checked request the engine leaves the classification of a miss and
    of a hit alike to the frontend, whose reshape leaves a reshaped output as it is."""
    config = _config("cached", True, _RESHAPED, True) + "response_cache { enable: true }\n"
    directory = models.write_model(
        tmp_path, "cached", models.identity_model("FP32", ["batch", 2, 3]), config
    )
    (directory / "labels.txt").write_text("\n".join(f"c{i}" for i in range(6)))
    await manager.load("cached")
    core = InferenceServer(manager, cache=ResponseCache(1 << 24))
    table = ModelSnapshot()
    table.update(snapshot(manager.loaded(), cache=True))
    for request in (_request("cached", 2), _request("cached", 2, classes=3)):
        for _ in range(2):  # a miss, then a hit (the key ignores the classification)
            mark = table.mark(request)
            assert mark is not None and mark[0][3] is not None
            raw = await core.infer(request, mark[0], True)
            assert raw.unshaped
            raw.outputs = shape_outputs(mark[1], request, raw.outputs)
            raw.unshaped = False
            assert _wire(raw) == _wire(await core.infer(request)), request
    stats = {s.name: s.stats for s in core.model_statistics("cached")}["cached"]
    assert stats.cache_hit.count == 7  # every request but the first


async def test_an_unnamed_datatype_still_fails_in_the_engine_and_is_counted(
    manager: ModelManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The datatype check stays where the statistics are: a checked request whose model
    answers in a type the protocol cannot name fails in the engine with the same text,
    counted as the model's failure exactly as an unchecked one."""
    model = manager.get("batched")
    scheduler = model.scheduler
    assert scheduler is not None
    enqueue = scheduler.enqueue  # type: ignore[attr-defined]

    def wrong_type(job: object) -> asyncio.Future[ExecutionResult]:
        done = enqueue(job)
        widened: asyncio.Future[ExecutionResult] = asyncio.get_running_loop().create_future()

        def convert(future: asyncio.Future[ExecutionResult]) -> None:
            result = future.result()
            outputs = {k: v.astype(np.complex64) for k, v in result.outputs.items()}
            widened.set_result(dataclasses.replace(result, outputs=outputs))

        done.add_done_callback(convert)
        return widened

    monkeypatch.setattr(scheduler, "enqueue", wrong_type)
    core = InferenceServer(manager)
    request = _request("batched", 1, classes=2)
    mark = _frontend(manager).mark(request)
    assert mark is not None
    text = (
        "model 'batched' produced output 'OUTPUT0' as complex64, which has no datatype in "
        "the inference protocol"
    )
    with pytest.raises(Internal) as checked:
        await _started(core, request, mark[0])
    with pytest.raises(Internal) as unchecked:
        await _started(core, request, None)
    assert checked.value.message == unchecked.value.message == text
    assert model.stats.failures["BACKEND"] == 2
