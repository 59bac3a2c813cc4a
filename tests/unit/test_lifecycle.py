"""ModelManager on temporary repositories: control modes, load / reload / unload, poll."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import models
import numpy as np
import pytest

from inference import model_config_pb2 as mc
from service import cache
from service.cache import ResponseCache
from service.core import inference_server as server_module
from service.core.inference_server import InferenceServer
from service.core.lifecycle import NOT_ALLOWED, ControlMode, IndexEntry, ModelManager
from service.core.model import ModelState
from service.errors import Internal, InvalidArgument, NotFound, Unavailable
from service.scheduling.base import Job
from service.types import InferRequest, InputTensor

ADD_SUB_IO = (
    [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])],
    [("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "FP32", [-1])],
)
# ~0.1-0.3 s per execution of a 1024-row batch on 2 cores.


def add_sub_config(name: str, max_batch_size: int = 8, extra: str = "") -> str:
    return models.make_config(name, *ADD_SUB_IO, max_batch_size=max_batch_size, extra=extra)


def write_add_sub(repo: Path, name: str, *, version: int = 1, extra: str = "") -> Path:
    return models.write_model(
        repo, name, models.add_sub_model(), add_sub_config(name, extra=extra), version
    )


def override(name: str, max_batch_size: int = 8, input0: str = "INPUT0") -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, backend="onnxruntime", max_batch_size=max_batch_size)
    for tname in (input0, "INPUT1"):
        config.input.add(name=tname, data_type=mc.TYPE_FP32, dims=[-1])
    for tname in ("OUTPUT0", "OUTPUT1"):
        config.output.add(name=tname, data_type=mc.TYPE_FP32, dims=[-1])
    return config


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    for name in ("alpha", "beta", "gamma"):
        write_add_sub(path, name)
    return path


@asynccontextmanager
async def manager(
    repositories: Sequence[Path],
    mode: ControlMode = ControlMode.EXPLICIT,
    startup: Sequence[str] = (),
) -> AsyncIterator[ModelManager]:
    m = ModelManager(list(repositories), mode=mode, startup_models=startup)
    await m.start()
    try:
        yield m
    finally:
        await m.unload_all()


async def add_sub_job(m: ModelManager, name: str, rows: int = 1) -> None:
    """Run one request through the scheduler of the served version and check it."""
    model = m.get(name)
    assert model.scheduler is not None
    a = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    b = np.full((rows, 3), 10.0, dtype=np.float32)
    job = Job({"INPUT0": a, "INPUT1": b}, ["OUTPUT0", "OUTPUT1"], rows)
    result = await model.scheduler.submit(job)
    np.testing.assert_array_equal(result.outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(result.outputs["OUTPUT1"], a - b)


def states(m: ModelManager) -> dict[str, list[tuple[str, str, str]]]:
    out: dict[str, list[tuple[str, str, str]]] = {}
    for e in m.index():
        assert isinstance(e, IndexEntry)
        out.setdefault(e.name, []).append((e.version, e.state, e.reason))
    return out


# --- control modes and start-up ---------------------------------------------------------------


async def test_none_mode_loads_everything_and_refuses_the_api(repo: Path) -> None:
    async with manager([repo], ControlMode.NONE) as m:
        assert m.mode is ControlMode.NONE
        assert states(m) == {n: [("1", "READY", "")] for n in ("alpha", "beta", "gamma")}
        for call in (m.load("alpha"), m.unload("alpha"), m.load("nope")):
            with pytest.raises(Unavailable) as info:
                await call
            assert info.value.message == NOT_ALLOWED
        await add_sub_job(m, "alpha")


async def test_poll_mode_refuses_the_api(repo: Path) -> None:
    async with manager([repo], ControlMode.POLL) as m:
        with pytest.raises(Unavailable, match=NOT_ALLOWED):
            await m.load("alpha", override("alpha"))
        with pytest.raises(Unavailable, match=NOT_ALLOWED):
            await m.unload("alpha")
        assert m.find("alpha") is not None


async def test_explicit_start_loads_only_startup_models(repo: Path) -> None:
    async with manager([repo], startup=["beta", "beta"]) as m:
        assert states(m) == {
            "alpha": [("", "", "")],
            "beta": [("1", "READY", "")],
            "gamma": [("", "", "")],
        }
        assert [e.name for e in m.entries()] == ["beta"]
        assert m.find("alpha") is None
        with pytest.raises(NotFound, match="Request for unknown model: 'alpha' is not found"):
            m.get("alpha")


async def test_explicit_start_without_models_loads_nothing(repo: Path) -> None:
    async with manager([repo]) as m:
        assert m.entries() == []
        assert m.all_ready()
        assert m.loaded() == []


async def test_explicit_start_star_loads_everything(repo: Path) -> None:
    async with manager([repo], startup=["*"]) as m:
        assert sorted(e.name for e in m.entries()) == ["alpha", "beta", "gamma"]


async def test_unknown_startup_model_is_a_value_error(repo: Path) -> None:
    m = ModelManager([repo], mode=ControlMode.EXPLICIT, startup_models=["alpha", "nope", "zip"])
    with pytest.raises(ValueError, match="no repository holds: nope, zip"):
        await m.start()
    assert m.entries() == []  # nothing loaded, not even the known one
    await m.unload_all()


# --- load, unload, index ----------------------------------------------------------------------


async def test_load_unload_and_index_states(repo: Path) -> None:
    async with manager([repo]) as m:
        assert states(m)["alpha"] == [("", "", "")]
        await m.load("alpha")
        assert states(m)["alpha"] == [("1", "READY", "")]
        model = m.get("alpha")
        assert model.state is ModelState.READY and model.ready
        assert m.get("alpha", "1") is model
        await add_sub_job(m, "alpha", rows=3)

        await m.unload("alpha")
        # As Triton 2.51 (reference): the versions it had stay listed, not ready.
        assert states(m)["alpha"] == [("1", "UNAVAILABLE", "unloaded")]
        assert model.state is ModelState.UNAVAILABLE and model.reason == "unloaded"
        assert model.scheduler is None and not model.ready
        assert m.find("alpha") is None
        with pytest.raises(NotFound) as found:
            m.get("alpha")
        assert found.value.message == (
            "Request for unknown model: 'alpha' has no available versions"
        )
        with pytest.raises(Unavailable) as info:
            m.get("alpha", "1")
        assert info.value.message == (
            "Request for unknown model: 'alpha' version 1 is not at ready state"
        )
        with pytest.raises(NotFound, match=r"^Request for unknown model: 'alpha' version 2 is not"):
            m.get("alpha", "2")
        with pytest.raises(InvalidArgument, match=r"^requested model 'alpha' is not available$"):
            m.loaded("alpha")
        await m.unload("alpha")  # unloading again is not an error

        await m.load("alpha")
        again = m.get("alpha")
        assert again is not model and again.ready
        assert states(m)["alpha"] == [("1", "READY", "")]
        await add_sub_job(m, "alpha")


async def test_unload_of_a_known_but_never_loaded_model(repo: Path) -> None:
    async with manager([repo]) as m:
        await m.unload("gamma")
        assert states(m)["gamma"] == [("", "UNAVAILABLE", "unloaded")]


async def test_unknown_model_load_and_unload_not_found(repo: Path) -> None:
    async with manager([repo]) as m:
        with pytest.raises(Internal) as info:  # Triton's code and text
            await m.load("nope")
        assert info.value.message == "failed to load 'nope', failed to poll from model repository"
        with pytest.raises(NotFound) as info:
            await m.unload("nope")
        assert info.value.message == "failed to unload 'nope': no model 'nope' is known"
        assert "nope" not in states(m)


async def test_index_ready_only_and_repository_name(repo: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    write_add_sub(other, "delta")
    async with manager([repo, other], startup=["alpha", "delta"]) as m:
        ready = m.index(ready_only=True)
        assert [(e.name, e.version, e.state) for e in ready] == [
            ("alpha", "1", "READY"),
            ("delta", "1", "READY"),
        ]
        assert [e.name for e in m.index("other")] == ["delta"]
        assert [e.name for e in m.index(str(repo))] == ["alpha", "beta", "gamma"]
        with pytest.raises(NotFound, match="unknown repository 'nowhere'"):
            m.index("nowhere")


async def test_load_with_override(repo: Path) -> None:
    async with manager([repo], startup=["alpha"]) as m:
        assert m.config("alpha").max_batch_size == 8
        await m.load("alpha", override("alpha", max_batch_size=3))
        assert m.config("alpha").max_batch_size == 3
        assert m.get("alpha").config.max_batch_size == 3
        await add_sub_job(m, "alpha", rows=3)
        await m.load("alpha")  # no override: back to config.pbtxt
        assert m.config("alpha").max_batch_size == 8


async def test_load_from_staged_files(repo: Path) -> None:
    onnx_bytes = models.add_sub_model().SerializeToString()
    async with manager([repo]) as m:
        await m.load("fresh", override("fresh"), {"1/model.onnx": onnx_bytes})
        model = m.get("fresh")
        assert model.version == 1 and model.ready
        await add_sub_job(m, "fresh", rows=2)
        assert states(m)["fresh"] == [("1", "READY", "")]
        # Staged models are not in the repository, so a poll must leave them alone...
        assert not (repo / "fresh").exists()
        staged_path = next(e.directory.path for e in m.entries() if e.name == "fresh")
        assert (staged_path / "1" / "model.onnx").read_bytes() == onnx_bytes
    # ...and unload_all removes the staging area.
    assert not staged_path.exists()


async def test_files_without_override_and_bad_file_names(repo: Path) -> None:
    onnx_bytes = models.add_sub_model().SerializeToString()
    async with manager([repo]) as m:
        with pytest.raises(InvalidArgument, match="'config' parameter must be provided"):
            await m.load("fresh", None, {"1/model.onnx": onnx_bytes})
        with pytest.raises(InvalidArgument, match="failed to load 'fresh'") as info:
            await m.load("fresh", override("fresh"), {"1/model.onnx": onnx_bytes, "1/./x": b"x"})
        assert "1/./x" in info.value.message
        # Out of the model folder: Triton's localize step fails, and with it its poll.
        with pytest.raises(Internal) as failed:
            await m.load("fresh", override("fresh"), {"1/model.onnx": onnx_bytes, "../x": b"x"})
        assert failed.value.message == (
            "failed to load 'fresh', failed to poll from model repository: "
            "file name '../x' must stay within the model directory"
        )
        assert m.find("fresh") is None


def files_outside_repo(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and "repo" not in p.parts]


@pytest.mark.parametrize("kind", ["parent", "absolute"])
async def test_staged_model_name_cannot_escape(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    server_tmp = tmp_path / "server_tmp"
    server_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(server_tmp))
    target = tmp_path / "escaped"
    name = "../../escaped" if kind == "parent" else str(target)
    onnx_bytes = models.add_sub_model().SerializeToString()
    async with manager([repo]) as m:
        with pytest.raises(InvalidArgument, match="failed to load"):
            await m.load(name, override(name), {"1/model.onnx": onnx_bytes})
        assert m.find(name) is None
    assert not target.exists()
    assert files_outside_repo(tmp_path) == []


def staged_copies(root: Path) -> list[Path]:
    """Every staged copy (one numbered folder each) under the server's temporary folder."""
    return sorted(p for area in root.glob("model-staging-*") for p in area.iterdir())


async def test_staged_copies_go_with_the_versions_that_use_them(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One copy while loaded, whatever the number of reloads; none after unload; a failed
    load or reload leaves nothing behind; the serving copy survives a failed reload."""
    server_tmp = tmp_path / "server_tmp"
    server_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(server_tmp))
    onnx_bytes = models.add_sub_model().SerializeToString()
    files = {"1/model.onnx": onnx_bytes}
    async with manager([repo]) as m:
        await m.load("fresh", override("fresh"), files)
        assert len(staged_copies(server_tmp)) == 1
        for _ in range(5):
            await m.load("fresh", override("fresh"), files)
            assert len(staged_copies(server_tmp)) == 1
        serving = staged_copies(server_tmp)
        with pytest.raises(InvalidArgument, match="load failed for model 'fresh'"):
            await m.load("fresh", override("fresh"), {"1/model.onnx": b"not onnx"})
        assert staged_copies(server_tmp) == serving  # the old version keeps its files
        await add_sub_job(m, "fresh", rows=1)
        await m.unload("fresh")
        assert staged_copies(server_tmp) == []
        with pytest.raises(InvalidArgument, match="load failed for model 'other'"):
            await m.load("other", override("other"), {"1/model.onnx": b"not onnx"})
        assert staged_copies(server_tmp) == []
        assert m.find("other") is None


@pytest.mark.parametrize(
    "name",
    ["1/" + "x" * 300, "1/" + "/".join(["d" * 200] * 30) + "/model.onnx"],
    ids=["part-too-long", "path-too-long"],
)
async def test_file_names_the_file_system_refuses_fail_the_poll_and_leave_nothing(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Triton's answer (its localize step fails, and its poll): INTERNAL "failed to poll
    from model repository", here with the file named. Was a bare OSError, INTERNAL with a
    half-written folder, then INVALID_ARGUMENT."""
    server_tmp = tmp_path / "server_tmp"
    server_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(server_tmp))
    files = {"1/model.onnx": models.add_sub_model().SerializeToString(), name: b"x"}
    async with manager([repo]) as m:
        with pytest.raises(Internal) as info:
            await m.load("fresh", override("fresh"), files)
        poll_failed = "failed to load 'fresh', failed to poll from model repository: "
        assert info.value.message.startswith(poll_failed)
        assert name.split("/")[1][:40] in info.value.message  # names the file
        assert staged_copies(server_tmp) == []
        assert m.find("fresh") is None
        await m.load("fresh", override("fresh"), {"1/model.onnx": files["1/model.onnx"]})
        assert m.get("fresh").ready  # nothing was left in the way


async def test_poll_mode_leaves_staged_models_alone(repo: Path) -> None:
    """An entry loaded from staged files is never unloaded for being absent on disk."""
    onnx_bytes = models.add_sub_model().SerializeToString()
    async with manager([repo], startup=["alpha"]) as m:
        await m.load("fresh", override("fresh"), {"1/model.onnx": onnx_bytes})
        await m.poll()
        assert m.find("fresh") is not None


# --- reload atomicity -------------------------------------------------------------------------


async def test_reload_retires_old_version_after_in_flight_jobs(tmp_path: Path) -> None:
    # The built-in identity backend sleeps in every execution: the jobs are still running
    # when the reload starts, whatever the machine's speed.
    version = tmp_path / "slow" / "1"
    version.mkdir(parents=True)
    (tmp_path / "slow" / "config.pbtxt").write_text(
        'name: "slow" backend: "identity" max_batch_size: 8\n'
        'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }]\n'
        'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]\n'
        'parameters { key: "execute_delay_ms" value { string_value: "300" } }\n'
    )
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    async with manager([tmp_path], startup=["slow"]) as m:
        old = m.get("slow")
        assert old.scheduler is not None
        expected = x
        jobs = [
            asyncio.create_task(old.scheduler.submit(Job({"INPUT0": x}, ["OUTPUT0"], 2)))
            for _ in range(2)
        ]
        await asyncio.sleep(0.02)  # both accepted by the old version's scheduler
        assert not any(j.done() for j in jobs)

        # A change beyond instance_group (which would update the instances in place,
        # tests/unit/test_instance_update.py): a full reload.
        config = tmp_path / "slow" / "config.pbtxt"
        config.write_text(config.read_text().replace('"300"', '"301"'))
        await m.load("slow")
        new = m.get("slow")
        assert new is not old and new.ready
        # The reload returned only after the old version finished what it had accepted.
        assert all(j.done() for j in jobs)
        for job in jobs:
            np.testing.assert_allclose(job.result().outputs["OUTPUT0"], expected, atol=1e-4)
        assert old.state is ModelState.UNAVAILABLE
        assert old.reason == "unloaded"
        assert old.scheduler is None
        assert states(m)["slow"] == [("1", "READY", "")]


async def test_requests_during_reload_see_a_ready_version(repo: Path) -> None:
    async with manager([repo], startup=["alpha"]) as m:
        stop = asyncio.Event()
        served = 0

        async def traffic() -> None:
            nonlocal served
            while not stop.is_set():
                await add_sub_job(m, "alpha")  # get() + submit(): must never fail
                served += 1
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(traffic()) for _ in range(3)]
        for batch in (4, 8, 2, 8):
            await m.load("alpha", override("alpha", max_batch_size=batch))
            assert m.config("alpha").max_batch_size == batch
            await asyncio.sleep(0.02)
        stop.set()
        await asyncio.gather(*tasks)
        assert served > 0


async def test_failed_reload_keeps_old_entry(repo: Path) -> None:
    async with manager([repo], startup=["alpha"]) as m:
        old = m.get("alpha")
        with pytest.raises(InvalidArgument, match="load failed for model 'alpha'") as info:
            await m.load("alpha", override("alpha", input0="NO_SUCH_INPUT"))
        assert "NO_SUCH_INPUT" in info.value.message
        assert m.get("alpha") is old
        assert old.ready and old.state is ModelState.READY
        assert states(m)["alpha"] == [("1", "READY", "")]
        assert m.all_ready()
        await add_sub_job(m, "alpha")


async def test_failed_first_load_leaves_an_unavailable_entry(repo: Path) -> None:
    models.write_model(repo, "broken", b"not an onnx model", add_sub_config("broken"))
    async with manager([repo]) as m:
        with pytest.raises(
            InvalidArgument,
            match=r"^load failed for model 'broken': version 1 is at UNAVAILABLE state: ",
        ):
            await m.load("broken")
        [(version, state, reason)] = states(m)["broken"]
        assert (version, state) == ("1", "UNAVAILABLE") and reason
        assert not m.all_ready()
        with pytest.raises(NotFound, match=r"'broken' has no available versions$"):
            m.get("broken")
        with pytest.raises(Unavailable, match=r"'broken' version 1 is not at ready state$"):
            m.get("broken", "1")
        await m.unload("broken")
        assert m.all_ready()


# --- poll -------------------------------------------------------------------------------------


async def test_poll_picks_up_added_changed_and_removed_models(repo: Path, tmp_path: Path) -> None:
    async with manager([repo], ControlMode.POLL) as m:
        alpha, beta = m.get("alpha"), m.get("beta")
        await m.poll()  # nothing changed: nothing reloaded
        assert m.get("alpha") is alpha and m.get("beta") is beta

        write_add_sub(repo, "delta")  # added
        (repo / "alpha" / "config.pbtxt").write_text(  # changed
            add_sub_config("alpha", max_batch_size=4), encoding="utf-8"
        )
        shutil.move(repo / "beta", tmp_path / "beta_gone")  # removed
        await m.poll()

        assert m.get("delta").ready
        await add_sub_job(m, "delta")
        new_alpha = m.get("alpha")
        assert new_alpha is not alpha and new_alpha.config.max_batch_size == 4
        assert alpha.state is ModelState.UNAVAILABLE
        assert m.find("beta") is None
        assert beta.state is ModelState.UNAVAILABLE and beta.reason == "unloaded"
        with pytest.raises(NotFound, match="'beta' has no available versions"):
            m.get("beta")
        assert sorted(e.name for e in m.entries()) == ["alpha", "delta", "gamma"]


async def test_poll_changed_file_contents_reload(repo: Path) -> None:
    async with manager([repo], ControlMode.POLL) as m:
        old = m.get("gamma")
        model_file = repo / "gamma" / "1" / "model.onnx"
        swapped = models.add_sub_model(output_names=("OUTPUT1", "OUTPUT0"))
        model_file.write_bytes(swapped.SerializeToString())
        stat = model_file.stat()
        os.utime(model_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        await m.poll()
        new = m.get("gamma")
        assert new is not old
        a = np.ones((1, 3), dtype=np.float32)
        assert new.scheduler is not None
        result = await new.scheduler.submit(Job({"INPUT0": a, "INPUT1": a}, ["OUTPUT0"], 1))
        np.testing.assert_array_equal(result.outputs["OUTPUT0"], a - a)  # outputs swapped


async def test_poll_new_version_under_latest_policy(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "m", extra="version_policy: { latest: { num_versions: 1 } }")
    async with manager([tmp_path], ControlMode.POLL) as m:
        v1 = m.get("m")
        assert v1.version == 1
        models.write_model(tmp_path, "m", models.add_sub_model(), None, version=2)
        await m.poll()
        assert m.get("m").version == 2
        assert m.get("m", "2").ready
        with pytest.raises(NotFound, match="'m' version 1 is not found"):
            m.get("m", "1")
        assert v1.state is ModelState.UNAVAILABLE
        assert states(m)["m"] == [("2", "READY", "")]


async def test_failed_poll_reload_keeps_serving_and_retries(repo: Path) -> None:
    async with manager([repo], ControlMode.POLL) as m:
        old = m.get("alpha")
        config = repo / "alpha" / "config.pbtxt"
        good = config.read_text(encoding="utf-8")
        config.write_text("this is { not a config", encoding="utf-8")
        await m.poll()
        assert m.get("alpha") is old and old.ready
        config.write_text(good.replace("max_batch_size: 8", "max_batch_size: 5"), "utf-8")
        await m.poll()  # the fingerprint still differs from the serving entry's: retried
        assert m.get("alpha").config.max_batch_size == 5


# --- readiness and lookups --------------------------------------------------------------------


async def test_all_ready_semantics(repo: Path) -> None:
    models.write_model(repo, "broken", b"garbage", add_sub_config("broken"))
    async with manager([repo], startup=["alpha"]) as m:
        assert m.all_ready()  # models never loaded do not count
        with pytest.raises(InvalidArgument):
            await m.load("broken")
        assert not m.all_ready()
        await m.unload("broken")
        assert m.all_ready()
    async with manager([repo], ControlMode.NONE) as m:
        assert not m.all_ready()  # a model of the repository failed at start-up


async def test_loaded_filters(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "multi", extra="version_policy: { all: { } }")
    models.write_model(tmp_path, "multi", models.add_sub_model(), None, version=2)
    write_add_sub(tmp_path, "single")
    write_add_sub(tmp_path, "off")
    async with manager([tmp_path], startup=["multi", "single", "off"]) as m:
        await m.unload("off")
        assert sorted((v.name, v.version) for v in m.loaded()) == [
            ("multi", 1),
            ("multi", 2),
            ("single", 1),
        ]
        assert [(v.name, v.version) for v in m.loaded("multi")] == [("multi", 1), ("multi", 2)]
        assert [(v.name, v.version) for v in m.loaded("multi", "2")] == [("multi", 2)]
        with pytest.raises(InvalidArgument, match="without a model name"):
            m.loaded("", "1")
        # TRITONSERVER_ServerModelStatistics' texts (checked on the reference).
        with pytest.raises(InvalidArgument, match=r"^requested model 'nope' is not available$"):
            m.loaded("nope")
        with pytest.raises(
            InvalidArgument, match=r"^requested model version is not available for model 'multi'$"
        ):
            m.loaded("multi", "9")
        with pytest.raises(InvalidArgument, match="'x'"):  # not a version number
            m.loaded("multi", "x")
        with pytest.raises(InvalidArgument, match=r"^requested model 'off' is not available$"):
            m.loaded("off")


async def test_get_latest_ready_version(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "multi", extra="version_policy: { all: { } }")
    models.write_model(tmp_path, "multi", b"broken version 3", None, version=3)
    models.write_model(tmp_path, "multi", models.add_sub_model(), None, version=2)
    async with manager([tmp_path], ControlMode.NONE) as m:
        assert m.get("multi").version == 2  # 3 failed: the latest ready one serves
        with pytest.raises(Unavailable, match="'multi' version 3 is not at ready state"):
            m.get("multi", "3")
        assert [e[:2] for e in states(m)["multi"]] == [
            ("1", "READY"),
            ("2", "READY"),
            ("3", "UNAVAILABLE"),
        ]
        assert not m.all_ready()
        assert [v.version for v in m.loaded("multi")] == [1, 2]


# --- a request racing a reload through the response cache -------------------------------------


async def test_reload_while_request_hashes_its_cache_key(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that already resolved its version must still be served when a reload
    retires that version while the request's cache key is being computed.

    Inputs over 64 KiB are hashed in a worker thread (InferenceServer._key), i.e. between
    ModelManager.get() and scheduler.submit(); the hash is slowed down here so that the
    reload lands in that window deterministically.
    """
    write_add_sub(repo, "cached", extra="response_cache { enable: true }")
    hashing = threading.Event()

    def slow_cache_key(*args: Any) -> bytes:
        hashing.set()
        time.sleep(0.3)
        return cache.cache_key(*args)

    monkeypatch.setattr(server_module, "cache_key", slow_cache_key)
    async with manager([repo], startup=["cached"]) as m:
        core = InferenceServer(m, cache=ResponseCache(1 << 24))
        a = np.arange(2 * 20_000, dtype=np.float32).reshape(2, 20_000)  # 160 KB per input

        def tensor(name: str) -> InputTensor:
            return InputTensor(name, "FP32", a.shape, raw=a.tobytes())

        request = InferRequest("cached", inputs=[tensor("INPUT0"), tensor("INPUT1")])
        pending = asyncio.create_task(core.infer(request))
        assert await asyncio.to_thread(hashing.wait, 10)  # the key is being hashed now
        await m.load("cached", override("cached", max_batch_size=4))  # retires version 1
        response = await pending
        outputs = {o.name: o.array for o in response.outputs}
        np.testing.assert_array_equal(outputs["OUTPUT0"], a + a)
        np.testing.assert_array_equal(outputs["OUTPUT1"], a - a)
