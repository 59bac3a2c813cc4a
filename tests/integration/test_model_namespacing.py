"""``--model-namespacing``: the same model name in two repositories, on a real server.

The flows of Triton's qa L0_model_namespacing (test.py) with this project's own models:
repository ``a`` holds ``composing`` as add_sub (OUTPUT0 = a + b) and the ensemble
``ens_a``; repository ``b`` holds ``composing`` as sub_add (OUTPUT0 = a - b) and ``ens_b``;
both hold an ensemble ``pipeline``. Each ensemble runs the ``composing`` of its own
repository, a name both hold is refused as ambiguous (Triton's text), and when one
``composing`` goes, both ensembles run the other. Texts and codes as checked on the
reference Triton 2.51.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import expect_error, running_server
from server_process import REPO_ROOT

ADD_SUB = REPO_ROOT / "tests" / "python_models" / "add_sub"
AMBIGUOUS = (
    "There are 2 identifiers of model '{}' in global map, model namespace must be provided "
    "to resolve ambiguity."
)
A = np.array([[5, 6, 7, 8]], dtype=np.float32)
B = np.ones((1, 4), dtype=np.float32)


def _ensemble(name: str) -> str:
    io = (ADD_SUB / "config.pbtxt").read_text().split("max_batch_size: 8", 1)[1]
    io = io.replace("dynamic_batching { }", "")
    maps = " ".join(
        [f'input_map {{ key: "{t}" value: "{t}" }}' for t in ("INPUT0", "INPUT1")]
        + [f'output_map {{ key: "{t}" value: "{t}" }}' for t in ("OUTPUT0", "OUTPUT1")]
    )
    step = f'step [ {{ model_name: "composing" model_version: -1 {maps} }} ]'
    return (
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n{io}\n'
        f"ensemble_scheduling {{ {step} }}\n"
    )


def _repositories(root: Path) -> tuple[Path, Path]:
    a, b = root / "a", root / "b"
    for repo, ensemble in ((a, "ens_a"), (b, "ens_b")):
        composing = repo / "composing"
        shutil.copytree(ADD_SUB, composing)
        config = (composing / "config.pbtxt").read_text().replace('"add_sub"', '"composing"')
        (composing / "config.pbtxt").write_text(config)
        if repo is b:  # sub_add: the outputs swapped
            code = (composing / "1" / "model.py").read_text()
            code = code.replace('("OUTPUT0", out_0', '("OUTPUT0", out_x')
            code = code.replace('("OUTPUT1", out_1', '("OUTPUT1", out_0')
            code = code.replace('("OUTPUT0", out_x', '("OUTPUT0", out_1')
            (composing / "1" / "model.py").write_text(code)
        for name in (ensemble, "pipeline"):
            (repo / name / "1").mkdir(parents=True)
            (repo / name / "config.pbtxt").write_text(_ensemble(name))
    return a, b


def _first_output(client: grpcclient.InferenceServerClient, model: str) -> list[float]:
    inputs = [grpcclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(B)
    return list(client.infer(model, inputs).as_numpy("OUTPUT0")[0])


ADDS = [6.0, 7.0, 8.0, 9.0]
SUBTRACTS = [4.0, 5.0, 6.0, 7.0]


def _wait_for(check: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            assert callable(check) and check()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_off_by_default_a_shared_name_stays_an_error(tmp_path: Path) -> None:
    a, b = _repositories(tmp_path)
    with (
        running_server([a, b], ["--model-control-mode=explicit"]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        expect_error(lambda: client.load_model("composing"), "INTERNAL")
        # its composing model is the shared name, which does not load
        expect_error(lambda: client.load_model("ens_a"), "INVALID_ARGUMENT")
        assert not client.is_model_ready("ens_a")


def test_poll_mode_resolves_names_and_relinks_ensembles(tmp_path: Path) -> None:
    a, b = _repositories(tmp_path)
    args = ["--model-namespacing=true", "--model-control-mode=poll", "--repository-poll-secs=1"]
    with (
        running_server([a, b], args) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        assert client.is_server_ready()
        assert _first_output(client, "ens_a") == ADDS
        assert _first_output(client, "ens_b") == SUBTRACTS
        for shared in ("composing", "pipeline"):
            expect_error(
                lambda s=shared: _first_output(client, s),  # type: ignore[misc]
                "INVALID_ARGUMENT",
                AMBIGUOUS.format(shared),
            )
        expect_error(
            lambda: client.get_model_metadata("composing"),
            "INVALID_ARGUMENT",
            AMBIGUOUS.format("composing"),
        )
        assert not client.is_model_ready("composing")
        config = client.get_model_config("ens_b", as_json=True)["config"]
        assert config["ensemble_scheduling"]["step"][0]["model_namespace"] == str(b)
        index = [(m.name, m.version, m.state) for m in client.get_model_repository_index().models]
        assert index.count(("composing", "1", "READY")) == 2
        assert index.count(("pipeline", "1", "READY")) == 2

        # a's composing goes: both ensembles run b's, and the name is no longer shared
        shutil.move(a / "composing", tmp_path / "composing")
        _wait_for(lambda: _first_output(client, "ens_a") == SUBTRACTS)
        assert _first_output(client, "composing") == SUBTRACTS
        assert _first_output(client, "ens_b") == SUBTRACTS
        # it comes back: ens_a runs its own again, and the name is ambiguous again
        shutil.move(tmp_path / "composing", a / "composing")
        _wait_for(lambda: _first_output(client, "ens_a") == ADDS)
        assert _first_output(client, "ens_b") == SUBTRACTS
        expect_error(
            lambda: _first_output(client, "composing"),
            "INVALID_ARGUMENT",
            AMBIGUOUS.format("composing"),
        )


def test_explicit_mode_loads_and_unloads_every_repository(tmp_path: Path) -> None:
    a, b = _repositories(tmp_path)
    args = ["--model-namespacing=true", "--model-control-mode=explicit"]
    with (
        running_server([a, b], args) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        expect_error(
            lambda: _first_output(client, "ens_a"),
            "INVALID_ARGUMENT",
            "Request for unknown model: 'ens_a' is not found",
        )
        client.load_model("pipeline")  # both pipelines, and the composing model of each
        expect_error(
            lambda: _first_output(client, "pipeline"),
            "INVALID_ARGUMENT",
            AMBIGUOUS.format("pipeline"),
        )
        client.load_model("ens_a")
        client.load_model("ens_b")
        assert _first_output(client, "ens_a") == ADDS
        assert _first_output(client, "ens_b") == SUBTRACTS
        expect_error(
            lambda: client.get_inference_statistics("composing"),
            "INVALID_ARGUMENT",
            "requested model 'composing' is not available",
        )
        client.unload_model("composing")  # the model of that name in each repository
        expect_error(
            lambda: _first_output(client, "composing"),
            "NOT_FOUND",
            "Identifier of model 'composing' is not found in global map",
        )
        assert not client.is_model_ready("ens_a")

        # a's composing is away: loading ens_a links it to b's
        shutil.move(a / "composing", tmp_path / "composing")
        client.load_model("ens_a")
        assert _first_output(client, "ens_a") == SUBTRACTS
        assert _first_output(client, "composing") == SUBTRACTS
        # back: loading ens_a again loads a's and relinks ens_a to it
        shutil.move(tmp_path / "composing", a / "composing")
        client.load_model("ens_a")
        assert _first_output(client, "ens_a") == ADDS
        expect_error(
            lambda: _first_output(client, "composing"),
            "INVALID_ARGUMENT",
            AMBIGUOUS.format("composing"),
        )


@pytest.mark.parametrize("value", ["false", "0"])
def test_namespacing_false_is_the_default(tmp_path: Path, value: str) -> None:
    a, _ = _repositories(tmp_path)
    with (
        running_server([a], [f"--model-namespacing={value}"]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        assert _first_output(client, "ens_a") == ADDS
        assert _first_output(client, "composing") == ADDS
