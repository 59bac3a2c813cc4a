"""Unloading with ``unload_dependents``: the composing models an ensemble brought in go
with it, as Triton's cascading removal does (DependencyGraph::RemoveNodes at r24.10).

Each case was checked on the reference Triton 2.51 (L0_lifecycle's ensemble repository,
explicit mode): a composing model named in a load of its own stays, unless that load
found it unchanged (Triton keeps the flag it had); one another loaded ensemble still
calls stays; nested ensembles go down to their leaves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import models
import pytest

from inference import model_config_pb2 as mc
from service.core.dependencies import callers, unused_composing
from service.core.inference_server import InferenceServer
from service.core.lifecycle import ControlMode, ModelManager

IO = (
    [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])],
    [("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "FP32", [-1])],
)


# --------------------------------------------------------------------------- the rule


def test_a_removed_ensembles_unused_composing_models_go() -> None:
    calls = {"ens": {"a", "b"}, "a": set(), "b": set(), "c": set()}
    assert unused_composing(["ens"], calls, explicit={"ens", "c"}) == ["a", "b"]


def test_explicit_or_still_called_models_stay() -> None:
    calls = {"ens": {"a", "b", "c"}, "other": {"b"}, "a": set(), "b": set(), "c": set()}
    assert unused_composing(["ens"], calls, explicit={"ens", "other", "a"}) == ["c"]


def test_nested_ensembles_go_down_to_their_leaves() -> None:
    calls = {"outer": {"inner"}, "inner": {"leaf"}, "leaf": set()}
    assert unused_composing(["outer"], calls, explicit={"outer"}) == ["inner", "leaf"]


def test_a_model_called_only_by_models_going_too_goes() -> None:
    """Two removed ensembles share a composing model: nothing left calls it."""
    calls = {"e1": {"a"}, "e2": {"a"}, "a": set()}
    assert unused_composing(["e1", "e2"], calls, explicit={"e1", "e2"}) == ["a"]


def test_models_not_in_the_table_are_skipped() -> None:
    assert unused_composing(["ens"], {"ens": {"gone"}}, explicit=set()) == []


# --------------------------------------------------------------------------- the manager


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """add_sub, shared (add_sub); ens -> add_sub, ens2 -> add_sub, outer -> ens."""
    path = tmp_path / "repo"
    for name in ("add_sub", "shared"):
        config = models.make_config(name, *IO, max_batch_size=8)
        models.write_model(path, name, models.add_sub_model(), config)
    models.write_ensemble(path, "ens", "add_sub")
    models.write_ensemble(path, "ens2", "add_sub")
    models.write_ensemble(path, "outer", "ens")
    return path


@asynccontextmanager
async def manager(repo: Path, startup: Sequence[str] = ()) -> AsyncIterator[ModelManager]:
    m = ModelManager([repo], mode=ControlMode.EXPLICIT, startup_models=startup)
    m.attach_runner(InferenceServer(m).step_runner)
    await m.start()
    try:
        yield m
    finally:
        await m.unload_all()


def ready(m: ModelManager) -> set[str]:
    return {e.name for e in m.index(ready_only=True)}


async def test_unload_with_dependents_takes_the_composing_model_along(repo: Path) -> None:
    async with manager(repo) as m:
        await m.load("ens")
        assert ready(m) == {"ens", "add_sub"}
        await m.unload("ens", unload_dependents=True)
        assert ready(m) == set()
        # Unloaded as Triton reports it, not forgotten.
        states = {(e.name, e.state, e.reason) for e in m.index()}
        assert ("add_sub", "UNAVAILABLE", "unloaded") in states


async def test_unload_without_dependents_leaves_the_composing_model(repo: Path) -> None:
    async with manager(repo) as m:
        await m.load("ens")
        await m.unload("ens")
        assert ready(m) == {"add_sub"}


async def test_a_composing_model_loaded_by_name_first_stays(repo: Path) -> None:
    async with manager(repo) as m:
        await m.load("add_sub")
        await m.load("ens")
        await m.unload("ens", unload_dependents=True)
        assert ready(m) == {"add_sub"}


async def test_a_later_unchanged_load_by_name_keeps_it_a_composing_model(repo: Path) -> None:
    """Triton finds the model unmodified and keeps its flag: it still goes."""
    async with manager(repo) as m:
        await m.load("ens")
        await m.load("add_sub")
        await m.unload("ens", unload_dependents=True)
        assert ready(m) == set()


async def test_a_later_load_with_a_config_makes_it_explicit(repo: Path) -> None:
    async with manager(repo) as m:
        await m.load("ens")
        config = mc.ModelConfig()
        config.CopyFrom(m.config("add_sub"))
        await m.load("add_sub", config)
        await m.unload("ens", unload_dependents=True)
        assert ready(m) == {"add_sub"}


async def test_a_model_another_ensemble_calls_stays(repo: Path) -> None:
    async with manager(repo) as m:
        await m.load("ens")
        await m.load("ens2")
        await m.unload("ens", unload_dependents=True)
        assert ready(m) == {"ens2", "add_sub"}
        await m.unload("ens2", unload_dependents=True)
        assert ready(m) == set()


async def test_nested_ensembles_unload_to_the_leaves(repo: Path) -> None:
    async with manager(repo) as m:
        await m.load("outer")
        assert ready(m) == {"outer", "ens", "add_sub"}
        await m.unload("outer", unload_dependents=True)
        assert ready(m) == set()


async def test_startup_models_are_explicit_their_composing_models_are_not(repo: Path) -> None:
    async with manager(repo, startup=["ens", "shared"]) as m:
        assert ready(m) == {"ens", "add_sub", "shared"}
        await m.unload("ens", unload_dependents=True)
        assert ready(m) == {"shared"}


# ------------------------------------------- the ensembles that call an unloaded model


def test_callers_go_up_nested_ensembles_outermost_first() -> None:
    calls = {"outer": {"ens"}, "ens": {"leaf"}, "ens_b": {"leaf"}, "leaf": set(), "x": set()}
    assert callers(["leaf"], calls) == ["outer", "ens_b", "ens"]
    assert callers(["ens"], calls) == ["outer"]
    assert callers(["x"], calls) == []


@pytest.mark.parametrize("flag", [False, True])
async def test_unloading_a_composing_model_unloads_its_ensembles_until_it_is_back(
    repo: Path, flag: bool
) -> None:
    """Triton 2.51 (checked on the reference): with or without the flag the ensembles
    calling the model go (index: UNAVAILABLE "unloaded"), and a load of the model by
    name loads them again, with fresh statistics."""
    async with manager(repo) as m:
        await m.load("ens")
        await m.load("ens2")
        served = m.get("ens")
        await m.unload("add_sub", unload_dependents=flag)
        assert ready(m) == set()
        states = {(e.name, e.state, e.reason) for e in m.index()}
        assert {("ens", "UNAVAILABLE", "unloaded"), ("ens2", "UNAVAILABLE", "unloaded")} <= states
        await m.load("add_sub")
        assert ready(m) == {"ens", "ens2", "add_sub"}
        assert m.get("ens") is not served  # loaded anew


async def test_nested_ensembles_go_and_come_back_with_their_leaf(repo: Path) -> None:
    async with manager(repo) as m:
        await m.load("outer")
        await m.unload("add_sub")
        assert ready(m) == set()
        await m.load("add_sub")
        assert ready(m) == {"outer", "ens", "add_sub"}
        await m.unload("ens")  # the middle one: outer waits for it, add_sub stays
        assert ready(m) == {"add_sub"}
        await m.load("ens")
        assert ready(m) == {"outer", "ens", "add_sub"}


async def test_an_ensemble_unloaded_by_name_meanwhile_stays_unloaded(repo: Path) -> None:
    async with manager(repo) as m:
        await m.load("ens")
        await m.unload("add_sub")
        await m.unload("ens")
        await m.load("add_sub")
        assert ready(m) == {"add_sub"}


async def test_a_composing_model_brought_back_by_another_ensemble_restores_it(
    repo: Path,
) -> None:
    async with manager(repo) as m:
        await m.load("ens")
        await m.unload("add_sub")
        await m.load("ens2")  # loads add_sub as its composing model
        assert ready(m) == {"ens", "ens2", "add_sub"}


async def test_a_restored_ensemble_keeps_its_flag_and_others_stay(repo: Path) -> None:
    """ens loaded by name, add_sub only as its composing model; add_sub unloaded with
    the flag and loaded again by name (now explicit): unloading ens with the flag leaves
    it, as on the reference. A model no ensemble calls is untouched throughout."""
    async with manager(repo, startup=["shared"]) as m:
        await m.load("ens")
        shared = m.get("shared")
        await m.unload("add_sub", unload_dependents=True)
        assert ready(m) == {"shared"}
        await m.load("add_sub")
        assert ready(m) == {"ens", "add_sub", "shared"}
        await m.unload("ens", unload_dependents=True)
        assert ready(m) == {"add_sub", "shared"}
        assert m.get("shared") is shared
