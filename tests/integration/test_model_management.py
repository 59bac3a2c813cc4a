"""The model-repository extension over gRPC: control modes, load / reload / unload, index.

Every test drives a real server subprocess through tritonclient. Each test owns the models it
changes (copies of add_sub in a temporary repository), so the tests do not depend on their
order beyond the start-up index check, which runs first.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from integration_support import (
    add_sub_inputs,
    assert_add_sub_serves,
    expect_error,
    grpc_stub,
    infer_input,
    running_server,
)
from server_process import DEFAULT_REPOSITORY, ServerProcess
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

NOT_ALLOWED = "explicit model load / unload is not allowed if polling is enabled"
DEFAULT_MODELS = (
    "add_sub",
    "iris_classifier",
    "iris_pipeline",
    "iris_preprocess",
    "text_upper",
    "token_stream",
)

ADD_SUB_IO = (
    [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])],
    [("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "FP32", [-1])],
)

# The slow model for "unload while in flight": ~0.2-0.4 s per request on 2 CPU cores
# (measured: width 1024, 8 layers, batch 512 takes 0.23 s in onnxruntime with 2 threads).
SLOW_WIDTH, SLOW_LAYERS, SLOW_BATCH = 1024, 6, 768


def add_sub_config(name: str, max_batch_size: int = 8, extra: str = "") -> str:
    return models.make_config(name, *ADD_SUB_IO, max_batch_size=max_batch_size, extra=extra)


def add_sub_json(
    name: str, max_batch_size: int = 8, instances: int = 1, input0: str = "INPUT0"
) -> str:
    """A complete ModelConfig for an add_sub model, as the JSON the 'config' parameter takes."""

    def tensor(tname: str) -> dict[str, object]:
        return {"name": tname, "data_type": "TYPE_FP32", "dims": [-1]}

    return json.dumps(
        {
            "name": name,
            "backend": "onnxruntime",
            "max_batch_size": max_batch_size,
            "input": [tensor(input0), tensor("INPUT1")],
            "output": [tensor("OUTPUT0"), tensor("OUTPUT1")],
            "instance_group": [{"count": instances, "kind": "KIND_CPU"}],
        }
    )


def files_under(*roots: Path) -> set[Path]:
    return {p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()}


def wait_until(condition: Callable[[], bool], timeout: float = 15.0, what: str = "") -> float:
    """Poll ``condition`` until true; returns the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.05)
    return time.monotonic() - start


def index_of(client: grpcclient.InferenceServerClient) -> dict[str, list[tuple[str, str, str]]]:
    """name -> [(version, state, reason)] from RepositoryIndex."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for m in client.get_model_repository_index().models:
        out.setdefault(m.name, []).append((m.version, m.state, m.reason))
    return out


def raw_index(url: str, ready: bool) -> list[tuple[str, str, str]]:
    with grpc_stub(url) as stub:
        response = stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=ready))
    return [(m.name, m.version, m.state) for m in response.models]


def infer_add_sub(
    client: grpcclient.InferenceServerClient, model: str, rng: np.random.Generator
) -> None:
    a = rng.standard_normal((1, 3), dtype=np.float32)
    b = rng.standard_normal((1, 3), dtype=np.float32)
    result = client.infer(model, add_sub_inputs(a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


# --- control mode none (the shared default server) -----------------------------------------


def test_none_mode_refuses_load_and_unload(client: grpcclient.InferenceServerClient) -> None:
    expect_error(lambda: client.load_model("add_sub"), "UNAVAILABLE", NOT_ALLOWED)
    expect_error(lambda: client.unload_model("add_sub"), "UNAVAILABLE", NOT_ALLOWED)
    expect_error(lambda: client.load_model("no_such_model"), "UNAVAILABLE", NOT_ALLOWED)
    assert client.is_model_ready("add_sub")
    assert_add_sub_serves(client)


def test_server_metadata_lists_repository_and_statistics_extensions(
    client: grpcclient.InferenceServerClient,
) -> None:
    extensions = list(client.get_server_metadata().extensions)
    for name in ("model_repository", "model_repository(unload_dependents)", "statistics"):
        assert name in extensions, extensions


# --- explicit mode ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def extra_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("explicit_repo")
    for name in ("cycle", "override_me", "fragile", "busy", "simple"):
        models.write_model(repo, name, models.add_sub_model(), add_sub_config(name))
    (repo / "versionless").mkdir()  # a config, but no numbered version folder
    (repo / "versionless" / "config.pbtxt").write_text(add_sub_config("versionless"))
    models.write_model(
        repo,
        "slow",
        models.mlp_model(SLOW_WIDTH, SLOW_LAYERS),
        models.make_config(
            "slow",
            [("INPUT0", "FP32", [SLOW_WIDTH])],
            [("OUTPUT0", "FP32", [SLOW_WIDTH])],
            max_batch_size=1024,
        ),
    )
    return repo


@pytest.fixture(scope="module")
def server_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The explicit server's TMPDIR: where its staging area for 'file:' loads lives."""
    return tmp_path_factory.mktemp("server_tmp")


@pytest.fixture(scope="module")
def explicit_server(extra_repository: Path, server_tmp: Path) -> Iterator[ServerProcess]:
    with running_server(
        [DEFAULT_REPOSITORY, extra_repository],
        extra_args=["--model-control-mode", "explicit", "--load-model", "add_sub"],
        env={"TMPDIR": str(server_tmp)},
    ) as server:
        yield server


@pytest.fixture
def ec(explicit_server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(explicit_server.url) as c:
        yield c


def test_explicit_startup_loads_only_named_model(ec: grpcclient.InferenceServerClient) -> None:
    index = index_of(ec)
    assert index["add_sub"] == [("1", "READY", "")]
    for name in ("iris_classifier", "text_upper", "cycle", "override_me", "fragile", "slow"):
        assert index[name] == [("", "", "")], (name, index[name])
        assert not ec.is_model_ready(name)
    assert ec.is_model_ready("add_sub")
    assert ec.is_model_ready("add_sub", "1")
    assert_add_sub_serves(ec)
    expect_error(
        lambda: ec.infer("text_upper", [infer_input("TEXT", np.array([b"a"], object), "BYTES")]),
        "NOT_FOUND",
        "Request for unknown model: 'text_upper' is not found",
    )


def test_index_ready_filter(explicit_server: ServerProcess) -> None:
    ready = raw_index(explicit_server.url, ready=True)
    assert ("add_sub", "1", "READY") in ready
    assert all(state == "READY" for _, _, state in ready), ready
    names = {name for name, _, _ in ready}
    assert not names & {"iris_classifier", "text_upper"}
    everything = {name for name, _, _ in raw_index(explicit_server.url, ready=False)}
    assert {*DEFAULT_MODELS, "cycle", "slow"} <= everything


def test_load_unload_load_again(ec: grpcclient.InferenceServerClient) -> None:
    ec.load_model("cycle")
    assert ec.is_model_ready("cycle")
    assert index_of(ec)["cycle"] == [("1", "READY", "")]
    assert_add_sub_serves(ec, "cycle")

    ec.unload_model("cycle")
    # As Triton 2.51 (reference): the version stays listed; the latest asked for is
    # NOT_FOUND, the version by number UNAVAILABLE.
    assert index_of(ec)["cycle"] == [("1", "UNAVAILABLE", "unloaded")]
    assert not ec.is_model_ready("cycle")
    assert not ec.is_model_ready("cycle", "1")
    expect_error(
        lambda: assert_add_sub_serves(ec, "cycle"),
        "NOT_FOUND",
        contains=["Request for unknown model: 'cycle' has no available versions"],
    )
    expect_error(
        lambda: ec.get_model_metadata("cycle", "1"),
        "UNAVAILABLE",
        contains=["Request for unknown model: 'cycle' version 1 is not at ready state"],
    )
    expect_error(
        lambda: ec.get_inference_statistics("cycle"),
        "INVALID_ARGUMENT",
        contains=["requested model 'cycle' is not available"],
    )
    # Unloading again is fine (Triton: a no-op) and unload_dependents is accepted.
    ec.unload_model("cycle", unload_dependents=True)
    assert not ec.is_model_ready("cycle")

    ec.load_model("cycle")
    assert ec.is_model_ready("cycle")
    assert index_of(ec)["cycle"] == [("1", "READY", "")]
    assert_add_sub_serves(ec, "cycle")
    ec.unload_model("cycle", unload_dependents=True)
    assert not ec.is_model_ready("cycle")


def test_load_with_config_override(ec: grpcclient.InferenceServerClient) -> None:
    ec.load_model("override_me")
    assert ec.get_model_config("override_me").config.max_batch_size == 8

    ec.load_model("override_me", config=add_sub_json("override_me", max_batch_size=2))
    assert ec.get_model_config("override_me").config.max_batch_size == 2
    assert_add_sub_serves(ec, "override_me")
    three = np.ones((3, 2), dtype=np.float32)
    expect_error(
        lambda: ec.infer("override_me", add_sub_inputs(three, three)),
        "INVALID_ARGUMENT",
        contains=["override_me"],
    )

    # A load without 'config' goes back to config.pbtxt.
    ec.load_model("override_me")
    assert ec.get_model_config("override_me").config.max_batch_size == 8
    result = ec.infer("override_me", add_sub_inputs(three, three))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), three * 2)


def test_load_with_config_and_file(
    ec: grpcclient.InferenceServerClient, server_tmp: Path, extra_repository: Path
) -> None:
    onnx_bytes = models.add_sub_model().SerializeToString()
    before_repo = files_under(extra_repository, DEFAULT_REPOSITORY)
    ec.load_model("staged", config=add_sub_json("staged"), files={"file:1/model.onnx": onnx_bytes})
    assert ec.is_model_ready("staged")
    assert ec.is_model_ready("staged", "1")
    assert index_of(ec)["staged"] == [("1", "READY", "")]
    assert_add_sub_serves(ec, "staged")
    # The files went to the server's own staging area, never into a repository.
    assert files_under(extra_repository, DEFAULT_REPOSITORY) == before_repo
    staged = [p for p in files_under(server_tmp) if p.name == "model.onnx"]
    assert staged and all(p.read_bytes() == onnx_bytes for p in staged)
    ec.unload_model("staged")
    assert not ec.is_model_ready("staged")


def test_file_without_config_is_invalid(ec: grpcclient.InferenceServerClient) -> None:
    onnx_bytes = models.add_sub_model().SerializeToString()
    expect_error(
        lambda: ec.load_model("nocfg", files={"file:1/model.onnx": onnx_bytes}),
        "INVALID_ARGUMENT",
        contains=["failed to load 'nocfg'", "'config' parameter must be provided"],
    )
    assert not ec.is_model_ready("nocfg")


POLL_FAILED = "failed to poll from model repository"

# Each bad name with its code. INTERNAL (Triton's: its localize step fails, and with it the
# repository poll): a name leading out of the model folder, a part too long for the file
# system. INVALID_ARGUMENT: names only this server refuses (Triton writes them).
BAD_FILE_NAMES = [
    ("file:../x", "INTERNAL"),
    ("file:ABSOLUTE", "INVALID_ARGUMENT"),  # an absolute path inside the test's tmp dir
    ("file:1/../../x", "INTERNAL"),
    ("file:1/../x", "INVALID_ARGUMENT"),
    ("file:1/./x", "INVALID_ARGUMENT"),
    ("file:x/model.onnx", "INVALID_ARGUMENT"),
    ("file:1", "INVALID_ARGUMENT"),
    ("file:1/" + "x" * 300, "INTERNAL"),  # longer than the file system allows
]


@pytest.mark.parametrize(("name", "code"), BAD_FILE_NAMES)
def test_file_name_escapes_are_refused(
    ec: grpcclient.InferenceServerClient,
    server_tmp: Path,
    extra_repository: Path,
    tmp_path: Path,
    name: str,
    code: str,
) -> None:
    """Each bad name is refused, together with the valid file sent beside it: nothing is
    written anywhere (not even the valid file) and no model is loaded."""
    model = f"escape{[n for n, _ in BAD_FILE_NAMES].index(name)}"
    if name == "file:ABSOLUTE":
        name = f"file:{tmp_path / 'escaped'}"
    onnx_bytes = models.add_sub_model().SerializeToString()
    watched = (server_tmp, extra_repository, DEFAULT_REPOSITORY, tmp_path)
    before = files_under(*watched)
    prefix = f"failed to load '{model}', {POLL_FAILED}: " if code == "INTERNAL" else ""
    expect_error(
        lambda: ec.load_model(
            model,
            config=add_sub_json(model),
            files={"file:1/model.onnx": onnx_bytes, name: b"x"},
        ),
        code,
        contains=[prefix or f"failed to load '{model}'", name.removeprefix("file:")],
    )
    assert files_under(*watched) == before
    assert not (tmp_path / "escaped").exists()
    assert not (server_tmp.parent / "x").exists()
    assert not ec.is_model_ready(model)


def test_file_name_part_too_long_is_triton_poll_failure(
    ec: grpcclient.InferenceServerClient, explicit_server: ServerProcess, server_tmp: Path
) -> None:
    """Triton's client example (simple_grpc_model_control.py) and L0_http: a name part over
    NAME_MAX fails the repository poll, INTERNAL "failed to poll from model repository"
    (Triton 2.51 itself aborted there; core r26.05 catches the filesystem error). The
    server lives on, nothing is staged, and the model loads normally afterwards."""
    long_name = "A" * 256
    before = files_under(server_tmp)
    for config in ("{}", add_sub_json("simple")):
        error = expect_error(
            lambda config=config: ec.load_model(
                "simple", config=config, files={f"file:{long_name}": b"a"}
            ),
            "INTERNAL",
        )
        assert error.message() == (
            f"failed to load 'simple', {POLL_FAILED}: file name '{long_name}' has a part "
            "longer than 255 bytes, the file system's limit"
        )
        assert ec.is_server_live()
        assert not ec.is_model_ready("simple")
        assert files_under(server_tmp) == before
    assert f"poll failed for the files sent with model 'simple': file name '{long_name}'" in (
        explicit_server.log
    )
    ec.load_model("simple")
    assert_add_sub_serves(ec, "simple")
    ec.unload_model("simple")


@pytest.mark.parametrize("case", ["instances", "absolute-file", "parent-file"])
def test_hostile_config_overrides_are_invalid_argument(
    ec: grpcclient.InferenceServerClient, tmp_path: Path, case: str
) -> None:
    """A config that would load without bound, or a model file from anywhere on the host
    (pathlib drops the version folder for an absolute name), fails at once."""
    onnx_bytes = models.add_sub_model().SerializeToString()
    outside = tmp_path / "outside.onnx"
    outside.write_bytes(onnx_bytes)
    config = json.loads(add_sub_json("hostile", instances=100000 if case == "instances" else 1))
    if case != "instances":
        name = str(outside) if case == "absolute-file" else "../../../../../" + str(outside)
        config["default_model_filename"] = name
    expected = {
        "instances": "asks for 100000 instances, more than the limit of 1024 "
        "(--max-instances-per-model)",
        "absolute-file": "must name a file inside the version folder",
        "parent-file": "must name a file inside the version folder",
    }[case]
    expect_error(
        lambda: ec.load_model(
            "hostile", config=json.dumps(config), files={"file:1/model.onnx": onnx_bytes}
        ),
        "INVALID_ARGUMENT",
        contains=["load failed for model 'hostile': version 1 is at UNAVAILABLE state", expected],
    )
    assert not ec.is_model_ready("hostile")
    assert ec.is_model_ready("add_sub")


def test_staged_copies_are_removed_with_their_versions(
    ec: grpcclient.InferenceServerClient, server_tmp: Path
) -> None:
    """One copy on disk while loaded however often it is reloaded, none after unload, and
    none left by a failed load (each used to stay until the server exited)."""

    def copies() -> list[Path]:
        return [p for area in server_tmp.glob("model-staging-*") for p in area.iterdir()]

    onnx_bytes = models.add_sub_model().SerializeToString()
    before = copies()
    for _ in range(6):
        ec.load_model(
            "staged", config=add_sub_json("staged"), files={"file:1/model.onnx": onnx_bytes}
        )
        assert len(copies()) == len(before) + 1
    assert ec.is_model_ready("staged")
    ec.unload_model("staged")
    assert copies() == before
    expect_error(
        lambda: ec.load_model(
            "staged", config=add_sub_json("staged"), files={"file:1/model.onnx": b"not onnx"}
        ),
        "INVALID_ARGUMENT",
        contains=["load failed for model 'staged'"],
    )
    assert copies() == before


@pytest.mark.parametrize("kind", ["parent", "absolute", "nested"])
def test_model_name_cannot_escape_the_staging_area(
    ec: grpcclient.InferenceServerClient, server_tmp: Path, tmp_path: Path, kind: str
) -> None:
    """The model name is part of the staged path too: '..' or an absolute name must not
    put the sent files outside the server's staging area."""
    target = tmp_path / "escaped_model"
    model = {
        "parent": f"../../{target.name}",  # TMPDIR/model-staging-*/<n>/../../<name>
        "absolute": str(target),
        "nested": f"a/../../../{target.name}",
    }[kind]
    onnx_bytes = models.add_sub_model().SerializeToString()
    before = files_under(server_tmp.parent)
    expect_error(
        lambda: ec.load_model(
            model, config=add_sub_json(model), files={"file:1/model.onnx": onnx_bytes}
        ),
        "INVALID_ARGUMENT",
        contains=[model],
    )
    created = sorted(str(p) for p in files_under(server_tmp.parent) - before)
    assert created == [], created
    assert not target.exists()
    assert not ec.is_model_ready(model)


def test_invalid_config_json(ec: grpcclient.InferenceServerClient) -> None:
    for text in ("{not json", '{"max_batch_size": "many"}', '{"no_such_field": 1}'):
        expect_error(
            lambda text=text: ec.load_model("cycle", config=text),
            "INVALID_ARGUMENT",
            contains=["failed to load 'cycle'", "parameter 'config' is not a valid ModelConfig"],
        )


def test_unknown_model_load_and_unload(ec: grpcclient.InferenceServerClient) -> None:
    expect_error(  # Triton's code and text
        lambda: ec.load_model("no_such_model"),
        "INTERNAL",
        "failed to load 'no_such_model', failed to poll from model repository",
    )
    expect_error(
        lambda: ec.unload_model("no_such_model"),
        "NOT_FOUND",
        "failed to unload 'no_such_model': no model 'no_such_model' is known",
    )


def test_model_without_version_folder(
    ec: grpcclient.InferenceServerClient, explicit_server: ServerProcess
) -> None:
    """Triton's lifecycle refuses it as a load failure (INVALID_ARGUMENT, its text); the
    index then lists no state of it, as Triton's lists none for a model with no version."""
    assert index_of(ec)["versionless"] == [("", "", "")]
    reason = (
        "at least one version must be available under the version policy of model 'versionless'"
    )
    error = expect_error(lambda: ec.load_model("versionless"), "INVALID_ARGUMENT")
    assert error.message() == f"load failed for model 'versionless': {reason}\n"
    assert "versionless" not in index_of(ec)
    assert not ec.is_model_ready("versionless")
    assert f"failed to load model 'versionless': {reason}" in explicit_server.log
    assert_add_sub_serves(ec)


def test_failed_reload_keeps_old_version_serving(ec: grpcclient.InferenceServerClient) -> None:
    ec.load_model("fragile")
    assert_add_sub_serves(ec, "fragile")
    expect_error(
        lambda: ec.load_model("fragile", config=add_sub_json("fragile", input0="NO_SUCH_INPUT")),
        "INVALID_ARGUMENT",
        contains=[
            "load failed for model 'fragile': version 1 is at UNAVAILABLE state:",
            "NO_SUCH_INPUT",
        ],
    )
    assert ec.is_model_ready("fragile")
    assert index_of(ec)["fragile"] == [("1", "READY", "")]
    inputs = [i.name for i in ec.get_model_config("fragile").config.input]
    assert inputs == ["INPUT0", "INPUT1"]
    assert_add_sub_serves(ec, "fragile")


def test_reload_under_load_loses_no_request(
    ec: grpcclient.InferenceServerClient, explicit_server: ServerProcess
) -> None:
    """4 clients send requests for ~3 s while the model is reloaded 3 times with compatible
    configs: no request may fail and every response must be right."""
    ec.load_model("busy")
    stop = threading.Event()
    errors: list[BaseException] = []
    done = [0] * 4

    def sender(slot: int) -> None:
        rng = np.random.default_rng(slot)
        with grpcclient.InferenceServerClient(explicit_server.url) as client:
            while not stop.is_set():
                try:
                    infer_add_sub(client, "busy", rng)
                    done[slot] += 1
                except BaseException as exc:  # every failure is a lost request
                    errors.append(exc)

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.4)
        for i, (batch, instances) in enumerate([(4, 2), (8, 1), (4, 2)]):
            ec.load_model("busy", config=add_sub_json("busy", batch, instances))
            config = ec.get_model_config("busy").config
            assert config.max_batch_size == batch, i
            assert sum(g.count for g in config.instance_group) == instances, i
            time.sleep(0.8)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors, f"{len(errors)} failed requests, first: {errors[0]!r}"
    assert all(n > 10 for n in done), done
    ec.unload_model("busy")


def _metrics_url(server: ServerProcess) -> str:
    server.wait_for_log("Started Metrics Service at ")  # may follow readiness
    found = re.search(r"Started Metrics Service at ([^\s]+)", server.log)
    assert found is not None, server.log
    return f"http://{found.group(1)}/metrics"


def _pending_requests(url: str, model: str) -> int:
    """Triton's nv_inference_pending_request_count: requests queued or executing."""
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    prefix = f'nv_inference_pending_request_count{{model="{model}",'
    return sum(
        int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines() if line.startswith(prefix)
    )


async def test_unload_while_requests_in_flight(explicit_server: ServerProcess) -> None:
    rng = np.random.default_rng(7)
    batch = rng.standard_normal((SLOW_BATCH, SLOW_WIDTH), dtype=np.float32)
    async with aioclient.InferenceServerClient(explicit_server.url) as client:
        await client.load_model("slow")

        async def call() -> np.ndarray:
            result = await client.infer("slow", [infer_input("INPUT0", batch, "FP32")])
            return result.as_numpy("OUTPUT0")

        await call()  # warm-up: the first run of a session is slower
        start = time.monotonic()
        expected = await call()  # the reference the in-flight answers must match
        one = time.monotonic() - start  # measured: ~0.2-0.4 s on 2 cores, ~0.04 s on CI
        # Enough requests to keep the single instance busy for ~0.5 s, however fast it runs.
        count = min(64, max(4, math.ceil(0.5 / max(one, 1e-3))))

        in_flight = [asyncio.create_task(call()) for _ in range(count)]
        # Unload once every request is in the server (queued behind the single instance,
        # or running) or answered: a fast machine answers the first ones while the client
        # is still sending the later ones (3 MB each).
        metrics = _metrics_url(explicit_server)
        while True:
            answered = sum(task.done() for task in in_flight)
            waiting = await asyncio.to_thread(_pending_requests, metrics, "slow")
            if waiting + answered >= count:
                break
            await asyncio.sleep(0.005)
        pending = [task for task in in_flight if not task.done()]
        assert pending, f"all requests finished before the unload ({one:.3f}s each)"
        await client.unload_model("slow")
        # Every request accepted before the unload is answered, and answered right (their
        # responses may reach this client just after the unload's).
        for output in await asyncio.gather(*in_flight):
            np.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-4)
        assert not await client.is_model_ready("slow")
        with pytest.raises(InferenceServerException) as info:
            await call()
        assert info.value.status() == "StatusCode.NOT_FOUND"
        assert "Request for unknown model: 'slow' has no available versions" in str(
            info.value.message()
        )


def test_load_star_loads_every_model() -> None:
    with (
        running_server(
            [DEFAULT_REPOSITORY],
            extra_args=["--model-control-mode", "explicit", "--load-model", "*"],
        ) as server,
        grpcclient.InferenceServerClient(server.url) as c,
    ):
        assert index_of(c) == {name: [("1", "READY", "")] for name in DEFAULT_MODELS}
        assert sorted(raw_index(server.url, ready=True)) == [
            (name, "1", "READY") for name in DEFAULT_MODELS
        ]
        assert_add_sub_serves(c)
        # Explicit mode: the API works on models loaded at start-up too.
        c.unload_model("text_upper")
        assert not c.is_model_ready("text_upper")
        assert ("text_upper", "1", "READY") not in raw_index(server.url, ready=True)


# --- poll mode --------------------------------------------------------------------------------

POLL_CONFIG_EXTRA = "version_policy: { latest: { num_versions: 1 } }"


@pytest.fixture(scope="module")
def poll_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(repository, scratch): models are built in scratch and renamed into the repository,
    so a poll never sees a half-written model."""
    repo = tmp_path_factory.mktemp("poll_repo")
    scratch = tmp_path_factory.mktemp("poll_scratch")
    for name in ("base", "doomed"):
        models.write_model(
            repo, name, models.add_sub_model(), add_sub_config(name, extra=POLL_CONFIG_EXTRA)
        )
    return repo, scratch


@pytest.fixture(scope="module")
def poll_server(poll_dirs: tuple[Path, Path]) -> Iterator[ServerProcess]:
    repo, _ = poll_dirs
    with running_server(
        [repo], extra_args=["--model-control-mode", "poll", "--repository-poll-secs", "0.5"]
    ) as server:
        yield server


@pytest.fixture
def pc(poll_server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(poll_server.url) as c:
        yield c


def test_poll_mode_refuses_load_and_unload(pc: grpcclient.InferenceServerClient) -> None:
    assert pc.is_model_ready("base")
    expect_error(lambda: pc.load_model("base"), "UNAVAILABLE", NOT_ALLOWED)
    expect_error(lambda: pc.unload_model("base"), "UNAVAILABLE", NOT_ALLOWED)
    assert pc.is_model_ready("base")


def test_poll_picks_up_new_model(
    pc: grpcclient.InferenceServerClient, poll_dirs: tuple[Path, Path]
) -> None:
    repo, scratch = poll_dirs
    assert not pc.is_model_ready("newcomer")
    built = models.write_model(
        scratch, "newcomer", models.add_sub_model(), add_sub_config("newcomer")
    )
    os.rename(built, repo / "newcomer")
    wait_until(lambda: pc.is_model_ready("newcomer"), what="newcomer ready")
    assert_add_sub_serves(pc, "newcomer")


def test_poll_new_version_replaces_old_under_latest_policy(
    pc: grpcclient.InferenceServerClient, poll_dirs: tuple[Path, Path]
) -> None:
    repo, scratch = poll_dirs
    assert pc.is_model_ready("base", "1")
    # Version 2 swaps the outputs, so a response tells which version computed it.
    swapped = models.add_sub_model(output_names=("OUTPUT1", "OUTPUT0"))
    built = models.write_model(scratch, "base_v2", swapped, None, version=2)
    os.rename(built / "2", repo / "base" / "2")
    wait_until(lambda: pc.is_model_ready("base", "2"), what="base version 2 ready")
    assert not pc.is_model_ready("base", "1")
    a = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    b = np.array([[10.0, 20.0, 30.0]], dtype=np.float32)
    result = pc.infer("base", add_sub_inputs(a, b))
    assert result.get_response().model_version == "2"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a - b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a + b)
    expect_error(
        lambda: pc.infer("base", add_sub_inputs(a, b), model_version="1"),
        "NOT_FOUND",
        contains=["'base' version 1 is not found"],
    )
    assert [
        (m.name, m.version, m.state)
        for m in pc.get_model_repository_index().models
        if m.name == "base"
    ] == [("base", "2", "READY")]


def test_poll_removed_model_is_unloaded(
    pc: grpcclient.InferenceServerClient, poll_dirs: tuple[Path, Path]
) -> None:
    repo, scratch = poll_dirs
    assert pc.is_model_ready("doomed")
    os.rename(repo / "doomed", scratch / "doomed_removed")
    wait_until(lambda: not pc.is_model_ready("doomed"), what="doomed unloaded")
    expect_error(
        lambda: assert_add_sub_serves(pc, "doomed"),
        "NOT_FOUND",
        contains=["Request for unknown model: 'doomed' has no available versions"],
    )
    assert pc.is_model_ready("base")
