"""--model-namespacing: a name in several repositories, resolved as Triton's core resolves
it (model_repository_manager.cc at r24.10, checked on the reference Triton 2.51)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import models
import numpy as np
import pytest

from service.core.checked import snapshot
from service.core.inference_server import InferenceServer
from service.core.lifecycle import ControlMode, ModelManager
from service.core.namespaces import keys_named
from service.errors import InvalidArgument, NotFound
from service.repository.layout import discover_models, model_key
from service.telemetry.metrics import MetricsRenderer
from service.types import InferRequest, InputTensor

IO = (
    [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])],
    [("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "FP32", [-1])],
)
AMBIGUITY = "model namespace must be provided to resolve ambiguity"


def write_add_sub(repo: Path, name: str, version: int = 1) -> None:
    config = models.make_config(name, *IO, max_batch_size=8)
    models.write_model(repo, name, models.add_sub_model(), config, version)


def write_ensemble(repo: Path, name: str, step: str) -> None:
    models.write_ensemble(repo, name, step)


@pytest.fixture
def repos(tmp_path: Path) -> tuple[Path, Path]:
    """a: composing (version 1), only_a, ens_a -> composing, shared_ens -> composing.
    b: composing (version 3), ens_b -> composing, lone_b -> only_a, shared_ens -> composing."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_add_sub(a, "composing", 1)
    write_add_sub(a, "only_a")
    write_ensemble(a, "ens_a", "composing")
    write_ensemble(a, "shared_ens", "composing")
    write_add_sub(b, "composing", 3)
    write_ensemble(b, "ens_b", "composing")
    write_ensemble(b, "lone_b", "only_a")
    write_ensemble(b, "shared_ens", "composing")
    return a, b


@asynccontextmanager
async def manager(
    repositories: Sequence[Path], mode: ControlMode = ControlMode.NONE
) -> AsyncIterator[ModelManager]:
    m = ModelManager(list(repositories), mode=mode, namespacing=True)
    m.attach_runner(InferenceServer(m).step_runner)
    await m.start()
    try:
        yield m
    finally:
        await m.unload_all()


def step_namespace(m: ModelManager, ensemble: str) -> str:
    return m.config(ensemble).ensemble_scheduling.step[0].model_namespace


def test_discovery_keys_each_repository_apart(repos: tuple[Path, Path]) -> None:
    a, b = repos
    found = discover_models([a, b], namespacing=True)
    assert sorted(keys_named(found, "composing")) == [
        model_key(str(a), "composing"),
        model_key(str(b), "composing"),
    ]
    assert not any(d.error for d in found.values())
    # Without namespacing the shared names are errors, as before.
    plain = discover_models([a, b])
    assert plain["composing"].error and plain["shared_ens"].error
    assert keys_named(plain, "only_a") == ["only_a"]
    # The same repository twice is still a duplicate with namespacing.
    assert discover_models([a, a], namespacing=True)[model_key(str(a), "ens_a")].error


async def test_a_unique_name_resolves_and_a_shared_one_is_ambiguous(
    repos: tuple[Path, Path],
) -> None:
    a, b = repos
    async with manager(repos) as m:
        assert m.get("only_a").namespace == str(a)
        assert m.get("ens_b").namespace == str(b)
        with pytest.raises(InvalidArgument) as caught:
            m.get("composing")
        assert caught.value.message == (
            f"There are 2 identifiers of model 'composing' in global map, {AMBIGUITY}."
        )
        with pytest.raises(InvalidArgument, match="Request for unknown model: 'nope' is not"):
            m.get("nope")
        assert m.find("composing") is None
        with pytest.raises(InvalidArgument, match="requested model 'composing' is not avail"):
            m.loaded("composing")
        assert len(m.loaded()) == 8  # every model of every repository


async def test_an_ensemble_step_finds_its_own_repository_first(repos: tuple[Path, Path]) -> None:
    a, b = repos
    async with manager(repos) as m:
        assert step_namespace(m, "ens_a") == str(a)
        assert step_namespace(m, "ens_b") == str(b)
        assert step_namespace(m, "lone_b") == str(a)  # the one model of that name
        assert m.get("composing", namespace=str(b)).version == 3
        server = InferenceServer(m)
        request = InferRequest(
            "ens_b",
            inputs=[
                InputTensor("INPUT0", "FP32", (1, 2), contents=np.array([3, 4], np.float32)),
                InputTensor("INPUT1", "FP32", (1, 2), contents=np.array([1, 1], np.float32)),
            ],
        )
        response = await server.infer(request)
        assert response.outputs[0].array.tolist() == [[4.0, 5.0]]
        assert m.get("composing", namespace=str(b)).stats.success.count == 1
        assert m.get("composing", namespace=str(a)).stats.success.count == 0


async def test_index_lists_each_repository_in_order(repos: tuple[Path, Path]) -> None:
    async with manager(repos) as m:
        names = [(e.name, e.version) for e in m.index()]
        assert names == [
            ("composing", "1"),
            ("ens_a", "1"),
            ("only_a", "1"),
            ("shared_ens", "1"),
            ("composing", "3"),
            ("ens_b", "1"),
            ("lone_b", "1"),
            ("shared_ens", "1"),
        ]


async def test_poll_relinks_an_ensemble_when_its_model_goes_and_comes(
    repos: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = repos
    async with manager(repos, ControlMode.POLL) as m:
        shutil.move(a / "composing", tmp_path / "composing")
        await m.poll()
        assert step_namespace(m, "ens_a") == str(b)
        assert m.get("composing").namespace == str(b)  # unique now
        shutil.move(tmp_path / "composing", a / "composing")
        await m.poll()
        assert step_namespace(m, "ens_a") == str(a)
        with pytest.raises(InvalidArgument, match=AMBIGUITY):
            m.get("composing")


async def test_explicit_load_and_unload_act_on_every_repository(
    repos: tuple[Path, Path],
) -> None:
    a, b = repos
    async with manager(repos, ControlMode.EXPLICIT) as m:
        await m.load("shared_ens")  # both ensembles, and the composing model of each
        assert m.get("composing", namespace=str(a)).version == 1
        assert m.get("composing", namespace=str(b)).version == 3
        with pytest.raises(InvalidArgument, match=AMBIGUITY):
            m.get("shared_ens")
        await m.unload("composing")
        with pytest.raises(NotFound, match="Identifier of model 'composing' is not found"):
            m.get("composing")
        # the ensembles that ran it go too, and come back with it (as on the reference
        # Triton 2.51: both UNAVAILABLE "unloaded", then both READY)
        states = [(e.name, e.state, e.reason) for e in m.index()]
        assert states.count(("shared_ens", "UNAVAILABLE", "unloaded")) == 2
        await m.load("composing")
        states = [(e.name, e.state, e.reason) for e in m.index()]
        assert states.count(("shared_ens", "READY", "")) == 2


async def test_an_ensemble_with_a_missing_model_fails_with_tritons_text(
    repos: tuple[Path, Path],
) -> None:
    a, _ = repos
    write_ensemble(a, "broken", "nowhere")
    async with manager(repos, ControlMode.EXPLICIT) as m:
        with pytest.raises(InvalidArgument) as caught:
            await m.load("broken")
        key = model_key(str(a), "broken")
        assert caught.value.message == (
            f"load failed for model '{key}': ensemble {key} contains models that are not "
            "available or ambiguous: nowhere\n"
        )


async def test_a_shared_name_is_left_out_of_the_frontends_snapshot(
    repos: tuple[Path, Path],
) -> None:
    async with manager(repos) as m:
        table = snapshot(m.loaded())
        assert "only_a" in table
        assert "composing" not in table  # the engine refuses it as ambiguous


async def test_metrics_carry_tritons_namespace_label(repos: tuple[Path, Path]) -> None:
    a, _ = repos
    async with manager(repos) as m:
        text = MetricsRenderer(m.loaded).render().decode()
    assert f'nv_inference_request_success{{model="only_a",namespace="{a}",version="1"}} 0' in text
    assert (
        f'nv_inference_request_failure{{model="only_a",namespace="{a}",reason="REJECTED",'
        'version="1"} 0'
    ) in text
