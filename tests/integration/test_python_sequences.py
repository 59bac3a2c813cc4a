"""Python models under the sequence batcher, as Triton runs them: the control tensors the
config declares (not listed as inputs) arrive with every request, Direct's empty slots
come as not-READY null requests, Oldest hands several sequences' requests to one
``execute``, and the sequence rules and texts are Triton's.

The model (tests/python_models/seq_controls) keeps running sums per correlation ID and
returns SEEN = [START, END, READY, CORRID, requests in this execute call].
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from integration_support import expect_error, running_server, wait_for_log
from server_process import REPO_ROOT, ServerProcess

MODEL = REPO_ROOT / "tests" / "python_models" / "seq_controls"


def _repository(root: Path, oldest: bool = False) -> Path:
    shutil.copytree(MODEL, root / "seq_controls")
    if oldest:
        config = root / "seq_controls" / "config.pbtxt"
        text = config.read_text().replace("max_batch_size: 2", "max_batch_size: 4")
        text = text.replace("sequence_batching {", "sequence_batching { oldest { }")
        config.write_text(text)
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server([_repository(tmp_path_factory.mktemp("pyseq"))]) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.url) as c:
        yield c


def _input(value: int, rows: int = 1) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT", [rows, 1], "INT32")
    tensor.set_data_from_numpy(np.full((rows, 1), value, dtype=np.int32))
    return [tensor]


def _step(
    client: grpcclient.InferenceServerClient,
    cid: int,
    value: int,
    start: bool = False,
    end: bool = False,
) -> tuple[int, list[int]]:
    result = client.infer(
        "seq_controls", _input(value), sequence_id=cid, sequence_start=start, sequence_end=end
    )
    return int(result.as_numpy("SUM")[0, 0]), result.as_numpy("SEEN")[0].tolist()


def test_python_model_with_control_inputs_loads_and_reports_them(
    client: grpcclient.InferenceServerClient,
) -> None:
    config = client.get_model_config("seq_controls").config
    assert [i.name for i in config.input] == ["INPUT"]  # controls are not client inputs
    assert _step(client, 11, 4, start=True) == (4, [1, 0, 1, 11, 1])
    assert _step(client, 11, 5) == (9, [0, 0, 1, 11, 1])
    assert _step(client, 11, 6, end=True) == (15, [0, 1, 1, 11, 1])


def test_direct_empty_slot_reaches_the_model_as_a_null_request(
    client: grpcclient.InferenceServerClient,
) -> None:
    """Slot 0's sequence ends while slot 1's goes on: the next execution holds a null
    request for slot 0 and the real one for slot 1 (two requests, as in Triton)."""
    assert _step(client, 21, 1, start=True)[0] == 1  # slot 0
    assert _step(client, 22, 10, start=True)[0] == 10  # slot 1
    assert _step(client, 21, 2, end=True)[0] == 3  # slot 0 frees
    assert _step(client, 22, 5, end=True) == (15, [0, 1, 1, 22, 2])


def test_start_on_a_live_sequence_restarts_it(
    client: grpcclient.InferenceServerClient, server: ServerProcess
) -> None:
    assert _step(client, 31, 1, start=True)[0] == 1
    assert _step(client, 31, 2)[0] == 3
    assert _step(client, 31, 10, start=True)[0] == 10  # no END came: a new sequence
    assert _step(client, 31, 5, end=True)[0] == 15
    wait_for_log(  # the server's stderr is read by a thread: the line may still be on its way
        server,
        "sequence 31 for model 'seq_controls' has a conflict. The previous sequence did not "
        "end before this sequence start. Previous sequence will be terminated early.",
    )


def test_sequence_errors_have_triton_texts(client: grpcclient.InferenceServerClient) -> None:
    expect_error(
        lambda: client.infer(
            "seq_controls", _input(1, rows=2), sequence_id=41, sequence_start=True
        ),
        "INVALID_ARGUMENT",
        "inference request to model 'seq_controls' must specify batch-size 1 due to "
        "requirements of sequence batcher",
    )
    expect_error(
        lambda: client.infer("seq_controls", _input(1)),
        "INVALID_ARGUMENT",
        "inference request to model 'seq_controls' must specify a non-zero or non-empty "
        "correlation ID",
    )
    expect_error(
        lambda: client.infer("seq_controls", _input(1), sequence_id=41),
        "INVALID_ARGUMENT",
        "inference request for sequence 41 to model 'seq_controls' must specify the START "
        "flag on the first request of the sequence",
    )
    assert _step(client, 41, 7, start=True, end=True)[0] == 7  # still serving


async def test_oldest_hands_several_sequences_to_one_execute(
    tmp_path: Path,
) -> None:
    """TRITONSERVER_DELAY_SCHEDULER=3 holds the batcher until three requests wait: the
    three sequences' first requests then reach the model in one execute call."""
    env = {"TRITONSERVER_DELAY_SCHEDULER": "3"}
    with running_server([_repository(tmp_path, oldest=True)], env=env) as proc:
        async with aioclient.InferenceServerClient(proc.url) as client:

            async def run(cid: int, values: list[int]) -> list[tuple[int, int]]:
                out = []
                for i, value in enumerate(values):
                    tensor = aioclient.InferInput("INPUT", [1, 1], "INT32")
                    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
                    result = await client.infer(
                        "seq_controls",
                        [tensor],
                        sequence_id=cid,
                        sequence_start=i == 0,
                        sequence_end=i == len(values) - 1,
                    )
                    seen = result.as_numpy("SEEN")[0].tolist()
                    out.append((int(result.as_numpy("SUM")[0, 0]), seen[4]))
                return out

            runs = await asyncio.gather(run(1, [1, 2]), run(2, [10, 20]), run(3, [100, 200]))
    assert [[total for total, _ in r] for r in runs] == [[1, 3], [10, 30], [100, 300]]
    assert [r[0][1] for r in runs] == [3, 3, 3]  # the first requests shared one execute
