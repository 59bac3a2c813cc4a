"""Stateful models end to end: the sequence batcher through tritonclient.

Models come from tests/sequence_models.py. The echo models return what the batcher fed
them (their own row and the whole batch), so the tests check START/END/READY/CORRID per
slot, dummy rows and which sequences shared an execution. The accumulators keep a running
sum in implicit state, checked exactly over many interleaved sequences.

Three servers: one without test hooks, one with ``TRITONSERVER_DELAY_SCHEDULER=4`` (each
model's batcher holds its first requests until 4 are pending: deterministic first batches)
and one with ``TRITONSERVER_BACKLOG_DELAY_SCHEDULER=1`` (holds until a request waits in the
backlog).
"""

from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from integration_support import expect_error, expect_rpc_error, grpc_stub, running_server
from models import write_model
from sequence_models import (
    ControlType,
    accumulator_config,
    accumulator_model,
    echo_config,
    echo_model,
    history_config,
    history_model,
    state,
)
from server_process import ServerProcess
from tritonclient.grpc import service_pb2

INVALID = "INVALID_ARGUMENT"
START_FLAG = "must specify the START flag"

# name -> (control type, CORRID type, one-dimensional controls)
ECHO_VARIANTS: dict[str, tuple[ControlType, str, bool]] = {
    "echo_fp32_u64": (ControlType("FP32"), "UINT64", False),
    "echo_int32_i64": (ControlType("INT32", (10, 20)), "INT64", False),
    "echo_bool_u32": (ControlType("BOOL", (False, True)), "UINT32", False),
    "echo_fp32_1d_i32": (ControlType("FP32", (-1.0, 2.5)), "INT32", True),
    "echo_int32_str": (ControlType("INT32"), "BYTES", False),
    "echo_bool_1d_str": (ControlType("BOOL", (False, True)), "BYTES", True),
}
CORRID_NUMPY = {"UINT64": np.uint64, "INT64": np.int64, "UINT32": np.uint32, "INT32": np.int32}
INITIAL_FILE_VALUE = 1000
VECTOR_INITIAL = np.array([100, 200, 300], dtype=np.int32)


# ----------------------------------------------------------------------------- fixtures


def _echo(root: Path, name: str, ctype: ControlType, corrid: str, one_dim: bool, **kw: Any) -> None:
    write_model(
        root,
        name,
        echo_model(
            ctype.datatype,
            corrid,
            one_dim_controls=one_dim,
            controls=kw.get("controls", ("START", "END", "READY")),
        ),
        echo_config(name, ctype, corrid, **kw),
    )


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sequence_repo")
    for name, (ctype, corrid, one_dim) in ECHO_VARIANTS.items():
        _echo(root, name, ctype, corrid, one_dim)
    _echo(
        root,
        "echo_idle",
        ControlType("INT32"),
        "UINT64",
        False,
        max_batch_size=1,
        idle_us=300_000,
    )
    seed = accumulator_model()
    plain = accumulator_model(reset_on_start=False)
    write_model(root, "accum", seed, accumulator_config("accum"))
    write_model(
        root,
        "accum_oldest",
        seed,
        accumulator_config(
            "accum_oldest",
            max_batch_size=4,
            instance_count=1,
            strategy="oldest { max_candidate_sequences: 6 max_queue_delay_microseconds: 2000 }",
        ),
    )
    write_model(
        root,
        "accum_zero",
        plain,
        accumulator_config(
            "accum_zero", reset_on_start=False, states=[state(zero_dims=[1])], output_state=True
        ),
    )
    file_dir = write_model(
        root,
        "accum_file",
        plain,
        accumulator_config("accum_file", reset_on_start=False, states=[state(file_dims=[1])]),
    )
    (file_dir / "initial_state").mkdir()
    (file_dir / "initial_state" / "initial_state_data").write_bytes(
        np.array([INITIAL_FILE_VALUE], dtype=np.int32).tobytes()
    )
    vector_dir = write_model(
        root,
        "accum_vector",
        accumulator_model(reset_on_start=False, vector_state=True),
        accumulator_config(
            "accum_vector",
            reset_on_start=False,
            states=[state(dims=[-1], file_dims=[3], data_file="vector.bin")],
            output_dims=[-1],
            output_state=True,
        ),
    )
    (vector_dir / "initial_state").mkdir()
    (vector_dir / "initial_state" / "vector.bin").write_bytes(VECTOR_INITIAL.tobytes())
    for name in ("history", "history_slots"):
        write_model(root, name, history_model(), history_config(name))
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo]) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.url) as c:
        yield c


@pytest.fixture(scope="module")
def held_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("sequence_held_repo")
    _echo(
        root,
        "direct_x2",
        ControlType("INT32"),
        "UINT64",
        False,
        max_batch_size=2,
        instance_count=2,
        strategy="direct { }",
    )
    _echo(
        root,
        "oldest4",
        ControlType("INT32"),
        "UINT64",
        False,
        controls=("START", "END"),
        max_batch_size=4,
        strategy=(
            "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 4 ] "
            "max_queue_delay_microseconds: 100000 }"
        ),
    )
    with running_server([root], env={"TRITONSERVER_DELAY_SCHEDULER": "4"}) as proc:
        yield proc


@pytest.fixture(scope="module")
def backlog_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("sequence_backlog_repo")
    write_model(root, "accum_x2", accumulator_model(), accumulator_config("accum_x2"))
    with running_server([root], env={"TRITONSERVER_BACKLOG_DELAY_SCHEDULER": "1"}) as proc:
        yield proc


# ----------------------------------------------------------------------------- helpers


def _value(value: int, rows: int = 1) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT", [rows, 1], "INT32")
    tensor.set_data_from_numpy(np.full((rows, 1), value, dtype=np.int32))
    return [tensor]


def _outputs(result: Any) -> dict[str, np.ndarray]:
    return {o.name: result.as_numpy(o.name) for o in result.get_response().outputs}


def _stats(url: str, model: str) -> Any:
    with grpcclient.InferenceServerClient(url) as c:
        return c.get_inference_statistics(model).model_stats[0]


def _batches(stats: Any) -> dict[int, int]:
    return {b.batch_size: b.compute_infer.count for b in stats.batch_stats}


def _flags(length: int) -> list[tuple[bool, bool]]:
    return [(i == 0, i == length - 1) for i in range(length)]


async def _run_sequence(
    client: aioclient.InferenceServerClient,
    model: str,
    sequence_id: int | str,
    values: Sequence[int],
    output: str = "OUTPUT",
    log: list[tuple[int | str, int]] | None = None,
) -> list[np.ndarray]:
    """Send ``values`` in order as one sequence; each request waits for the previous one."""
    results = []
    for index, (value, (start, end)) in enumerate(zip(values, _flags(len(values)), strict=True)):
        result = await client.infer(
            model,
            _value(value),
            sequence_id=sequence_id,
            sequence_start=start,
            sequence_end=end,
        )
        results.append(result.as_numpy(output))
        if log is not None:
            log.append((sequence_id, index))
    return results


def _cumsum(values: Sequence[int]) -> list[int]:
    return [int(v) for v in np.cumsum(values)]


# ----------------------------------------------------------------------------- control inputs


@pytest.mark.parametrize("model", sorted(ECHO_VARIANTS))
def test_control_inputs_per_request(client: grpcclient.InferenceServerClient, model: str) -> None:
    """START only on the first request, END only on the last, READY on every request, CORRID
    the sequence id, in the type and with the false/true values the config names."""
    ctype, corrid, _ = ECHO_VARIANTS[model]
    sequence_id: int | str = "sequence-a/1" if corrid == "BYTES" else 4242
    expected_id = (
        np.array([[b"sequence-a/1"]], dtype=np.object_)
        if corrid == "BYTES"
        else np.array([[4242]], dtype=CORRID_NUMPY[corrid])
    )
    values = [3, 1, 4, 1]
    for value, (start, end) in zip(values, _flags(len(values)), strict=True):
        out = _outputs(
            client.infer(
                model,
                _value(value),
                sequence_id=sequence_id,
                sequence_start=start,
                sequence_end=end,
            )
        )
        np.testing.assert_array_equal(out["OUTPUT"], [[value]])
        for name, flag in (("START", start), ("END", end), ("READY", True)):
            assert out[f"OUT_{name}"].dtype == ctype.numpy(flag).dtype, name
            np.testing.assert_array_equal(out[f"OUT_{name}"], [[ctype.numpy(flag)]], err_msg=name)
            # One sequence alone: a batch of one row (no dummy rows after it).
            np.testing.assert_array_equal(out[f"ALL_{name}"], [[ctype.numpy(flag)]], err_msg=name)
        assert out["OUT_CORRID"].dtype == expected_id.dtype
        np.testing.assert_array_equal(out["OUT_CORRID"], expected_id)
        np.testing.assert_array_equal(out["ALL_CORRID"], expected_id)
        np.testing.assert_array_equal(out["ALL_INPUT"], [[value]])


def test_single_request_sequence_has_start_and_end(
    client: grpcclient.InferenceServerClient,
) -> None:
    """START and END on one request (int32_false_true [10, 20]); the sequence is over at
    once, so the same id may start again right away."""
    for _ in range(2):
        out = _outputs(
            client.infer(
                "echo_int32_i64", _value(9), sequence_id=5, sequence_start=True, sequence_end=True
            )
        )
        for name in ("OUT_START", "OUT_END", "OUT_READY"):
            np.testing.assert_array_equal(out[name], [[20]], err_msg=name)
        np.testing.assert_array_equal(out["OUT_CORRID"], [[5]])


async def test_string_ids_are_separate_sequences(server: ServerProcess) -> None:
    """Concurrent sequences with string ids on a STRING-CORRID model each get their own id."""
    client = aioclient.InferenceServerClient(server.url)
    try:
        ids = [f"user-{i}" for i in range(4)]
        runs = await asyncio.gather(
            *(
                _run_sequence(client, "echo_int32_str", sid, [i + 1] * 3, output="OUT_CORRID")
                for i, sid in enumerate(ids)
            )
        )
    finally:
        await client.close()
    for sid, outputs in zip(ids, runs, strict=True):
        for out in outputs:
            np.testing.assert_array_equal(out, np.array([[sid.encode()]], dtype=np.object_))


@pytest.mark.parametrize(
    ("model", "sequence_id"),
    [("echo_fp32_u64", "abc"), ("echo_fp32_1d_i32", 2**40)],
    ids=["string-id-for-UINT64", "id-over-INT32"],
)
def test_sequence_id_that_does_not_fit_the_corrid_type_is_invalid(
    client: grpcclient.InferenceServerClient, model: str, sequence_id: int | str
) -> None:
    """The CORRID control's data_type cannot hold this id (a string for UINT64, 2**40 for
    INT32): a bad request, refused as INVALID_ARGUMENT, not a failure inside the model's
    execution (which would also fail every other sequence batched with it)."""
    expect_error(
        lambda: client.infer(
            model, _value(1), sequence_id=sequence_id, sequence_start=True, sequence_end=True
        ),
        INVALID,
    )
    # The model still serves ids that fit.
    out = _outputs(
        client.infer(model, _value(1), sequence_id=8, sequence_start=True, sequence_end=True)
    )
    np.testing.assert_array_equal(out["OUT_CORRID"], [[8]])


def test_uint64_sequence_id_beyond_int64(server: ServerProcess) -> None:
    """Triton's protocol carries large ids as uint64_param; CORRID UINT64 gets them intact."""
    request = service_pb2.ModelInferRequest(model_name="echo_fp32_u64", id="big")
    request.parameters["sequence_id"].uint64_param = 2**64 - 2
    request.parameters["sequence_start"].bool_param = True
    request.parameters["sequence_end"].bool_param = True
    tensor = request.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1])
    tensor.contents.int_contents.append(3)
    with grpc_stub(server.url) as stub:
        response = stub.ModelInfer(request, timeout=30)
    outputs = {o.name: i for i, o in enumerate(response.outputs)}
    corrid = np.frombuffer(response.raw_output_contents[outputs["OUT_CORRID"]], dtype=np.uint64)
    assert corrid.tolist() == [2**64 - 2]


# ----------------------------------------------------------------------------- implicit state


async def test_interleaved_sequences_from_concurrent_clients(server: ServerProcess) -> None:
    """12 sequences x 8 requests over 3 clients, on the seed's accumulator (2 instances x 2
    slots: 8 sequences wait in the backlog at first) and on an Oldest-strategy copy."""
    rng = np.random.default_rng(5)
    values = {1000 + i: [int(v) for v in rng.integers(-50, 100, 8)] for i in range(12)}
    clients = [aioclient.InferenceServerClient(server.url) for _ in range(3)]
    try:
        for model in ("accum", "accum_oldest"):
            runs = await asyncio.gather(
                *(
                    _run_sequence(clients[i % 3], model, sid, vals)
                    for i, (sid, vals) in enumerate(values.items())
                )
            )
            for (sid, vals), outputs in zip(values.items(), runs, strict=True):
                got = [int(o[0, 0]) for o in outputs]
                assert got == _cumsum(vals), (model, sid)
    finally:
        for c in clients:
            await c.close()
    oldest = _stats(server.url, "accum_oldest")
    assert oldest.inference_count >= 96
    assert max(_batches(oldest)) > 1, "Oldest formed no batch across sequences"


def test_start_resets_state(client: grpcclient.InferenceServerClient) -> None:
    """The seed's model: OUTPUT_STATE = INPUT on a START row; a restarted id starts over."""
    for _ in range(2):
        got = []
        for value, (start, end) in zip([7, 2, 3], _flags(3), strict=True):
            result = client.infer(
                "accum", _value(value), sequence_id=35, sequence_start=start, sequence_end=end
            )
            got.append(int(result.as_numpy("OUTPUT")[0, 0]))
        assert got == [7, 9, 12]


def test_zero_initial_state_and_requested_output_state(
    client: grpcclient.InferenceServerClient,
) -> None:
    """No reset on START: the initial state (zeros) shows; OUTPUT_STATE may be requested
    because the config lists it, and equals OUTPUT. After END the state is freed: the same
    id starts again from the initial state."""
    requested = [
        grpcclient.InferRequestedOutput("OUTPUT"),
        grpcclient.InferRequestedOutput("OUTPUT_STATE"),
    ]
    for _ in range(2):
        got = []
        for value, (start, end) in zip([5, 6, 7], _flags(3), strict=True):
            out = _outputs(
                client.infer(
                    "accum_zero",
                    _value(value),
                    outputs=requested,
                    sequence_id=31,
                    sequence_start=start,
                    sequence_end=end,
                )
            )
            assert set(out) == {"OUTPUT", "OUTPUT_STATE"}
            np.testing.assert_array_equal(out["OUTPUT_STATE"], out["OUTPUT"])
            got.append(int(out["OUTPUT"][0, 0]))
        assert got == [5, 11, 18]
    only_state = client.infer(
        "accum_zero",
        _value(2),
        outputs=[grpcclient.InferRequestedOutput("OUTPUT_STATE")],
        sequence_id=32,
        sequence_start=True,
        sequence_end=True,
    )
    assert [o.name for o in only_state.get_response().outputs] == ["OUTPUT_STATE"]
    np.testing.assert_array_equal(only_state.as_numpy("OUTPUT_STATE"), [[2]])


def test_output_state_not_in_config_cannot_be_requested(
    client: grpcclient.InferenceServerClient,
) -> None:
    expect_error(
        lambda: client.infer(
            "accum",
            _value(1),
            outputs=[grpcclient.InferRequestedOutput("OUTPUT_STATE")],
            sequence_id=33,
            sequence_start=True,
            sequence_end=True,
        ),
        INVALID,
        contains=["unexpected inference output 'OUTPUT_STATE'"],
    )


async def test_initial_state_from_data_file(server: ServerProcess) -> None:
    """Every sequence starts from the file's value; one sequence never changes another's
    starting point (the initial state is copied, not shared)."""
    client = aioclient.InferenceServerClient(server.url)
    try:
        runs = await asyncio.gather(
            *(_run_sequence(client, "accum_file", 60 + i, [i, 10, 100]) for i in range(5))
        )
        again = await _run_sequence(client, "accum_file", 60, [1])
    finally:
        await client.close()
    for i, outputs in enumerate(runs):
        assert [int(o[0, 0]) for o in outputs] == [
            INITIAL_FILE_VALUE + v for v in _cumsum([i, 10, 100])
        ]
    assert int(again[0][0, 0]) == INITIAL_FILE_VALUE + 1


def test_vector_initial_state_from_file_with_variable_dims(
    client: grpcclient.InferenceServerClient,
) -> None:
    """State dims [-1] with a [3] initial state from file: the state is a 3-vector."""
    total = VECTOR_INITIAL.copy()
    for value, (start, end) in zip([1, 2, 3], _flags(3), strict=True):
        total = total + value
        out = _outputs(
            client.infer(
                "accum_vector",
                _value(value),
                sequence_id=77,
                sequence_start=start,
                sequence_end=end,
            )
        )
        np.testing.assert_array_equal(out["OUTPUT"], [total])
        np.testing.assert_array_equal(out["OUTPUT_STATE"], [total])


async def test_state_that_changes_shape(server: ServerProcess) -> None:
    """State dims [-1] and no initial_state: the first request gets zeros of shape [1], and
    each request's output state (one element longer) is the next request's input state."""
    client = aioclient.InferenceServerClient(server.url)
    lengths = {90: 2, 91: 5, 92: 7}
    try:
        runs = await asyncio.gather(
            *(
                _run_sequence(client, "history", sid, [sid * 10 + i for i in range(n)])
                for sid, n in lengths.items()
            )
        )
    finally:
        await client.close()
    for (sid, n), outputs in zip(lengths.items(), runs, strict=True):
        for i, out in enumerate(outputs):
            np.testing.assert_array_equal(out, [[0, *(sid * 10 + k for k in range(i + 1))]])
        assert len(outputs) == n


def test_empty_slot_next_to_a_grown_state(client: grpcclient.InferenceServerClient) -> None:
    """Direct, one instance with two slots: sequence 95 holds slot 0, 96 slot 1. Once 95
    has ended, 96's next request runs with slot 0 empty. The empty slot's dummy row must
    not break the batch although 96's state has grown to shape [2]."""
    client.infer("history_slots", _value(1), sequence_id=95, sequence_start=True)
    first = client.infer("history_slots", _value(5), sequence_id=96, sequence_start=True)
    np.testing.assert_array_equal(first.as_numpy("OUTPUT"), [[0, 5]])
    client.infer("history_slots", _value(2), sequence_id=95, sequence_end=True)
    second = client.infer("history_slots", _value(6), sequence_id=96, sequence_end=True)
    np.testing.assert_array_equal(second.as_numpy("OUTPUT"), [[0, 5, 6]])


def test_control_and_state_tensors_are_not_client_inputs(
    client: grpcclient.InferenceServerClient,
) -> None:
    metadata = client.get_model_metadata("accum")
    assert [t.name for t in metadata.inputs] == ["INPUT"]
    assert [t.name for t in metadata.outputs] == ["OUTPUT"]
    echo = client.get_model_metadata("echo_fp32_u64")
    assert [t.name for t in echo.inputs] == ["INPUT"]
    for name in ("INPUT_STATE", "START"):
        extra = grpcclient.InferInput(name, [1, 1], "INT32")
        extra.set_data_from_numpy(np.zeros((1, 1), dtype=np.int32))
        expect_error(
            # In place of INPUT (with it, Triton's count check would speak first).
            lambda extra=extra: client.infer(
                "accum",
                [extra],
                sequence_id=34,
                sequence_start=True,
                sequence_end=True,
            ),
            INVALID,
            contains=[f"unexpected inference input '{extra.name()}'"],
        )


# ----------------------------------------------------------------------------- Direct / backlog


async def test_direct_two_instances_two_slots(held_server: ServerProcess) -> None:
    """count 2 x max_batch_size 2: four sequences run at once as two batch-2 executions
    (one per instance), a fifth waits in the backlog until one ends, then takes the freed
    slot; an execution with one empty slot before a ready one gets a zero row, READY false."""
    url = held_server.url
    client = aioclient.InferenceServerClient(url)
    try:

        async def send(sid: int, value: int, start: bool = False, end: bool = False) -> Any:
            return _outputs(
                await client.infer(
                    "direct_x2",
                    _value(value),
                    sequence_id=sid,
                    sequence_start=start,
                    sequence_end=end,
                )
            )

        # 1. Four starts, held until all four are pending; accepted in order 1, 2, 3, 4.
        tasks = []
        for sid in (1, 2, 3, 4):
            tasks.append(asyncio.create_task(send(sid, sid * 10, start=True)))
            await asyncio.sleep(0.1)
        first = dict(zip((1, 2, 3, 4), await asyncio.gather(*tasks), strict=True))
        stats = _stats(url, "direct_x2")
        assert (stats.inference_count, stats.execution_count) == (4, 2)
        assert _batches(stats) == {2: 2}
        # New sequences spread over the instances: 1 and 3 share one, 2 and 4 the other.
        for sid, partner in ((1, 3), (3, 1), (2, 4), (4, 2)):
            out = first[sid]
            np.testing.assert_array_equal(out["OUTPUT"], [[sid * 10]])
            assert sorted(out["ALL_CORRID"][0].tolist()) == sorted([sid, partner])
            np.testing.assert_array_equal(out["ALL_START"], [[1, 1]])
            np.testing.assert_array_equal(out["ALL_READY"], [[1, 1]])
            np.testing.assert_array_equal(out["ALL_END"], [[0, 0]])
        slot_of = {sid: first[sid]["ALL_CORRID"][0].tolist().index(sid) for sid in (1, 2, 3, 4)}
        assert slot_of == {1: 0, 2: 0, 3: 1, 4: 1}

        # 2. A fifth sequence finds every slot taken: it waits in the backlog.
        fifth = asyncio.create_task(send(5, 50, start=True))
        await asyncio.sleep(0.5)
        assert not fifth.done(), "the fifth sequence ran although all four slots are taken"

        # 3. Sequence 1 ends: its slot goes to sequence 5.
        ended = await send(1, 11, end=True)
        np.testing.assert_array_equal(ended["ALL_CORRID"], [[1]])
        np.testing.assert_array_equal(ended["OUT_END"], [[1]])
        got5 = await asyncio.wait_for(fifth, 10)
        np.testing.assert_array_equal(got5["OUT_START"], [[1]])
        np.testing.assert_array_equal(got5["OUT_CORRID"], [[5]])

        # 4. Only sequence 3 (slot 1) has a request: slot 0 (sequence 5) is a dummy row.
        lone = await send(3, 33)
        np.testing.assert_array_equal(lone["OUTPUT"], [[33]])
        np.testing.assert_array_equal(lone["ALL_CORRID"], [[0, 3]])
        np.testing.assert_array_equal(lone["ALL_READY"], [[0, 1]])
        np.testing.assert_array_equal(lone["ALL_START"], [[0, 0]])
        np.testing.assert_array_equal(lone["ALL_INPUT"], [[0, 33]])
        np.testing.assert_array_equal(lone["OUT_READY"], [[1]])

        # Sequence 5 is in sequence 1's old slot (0), sequence 3 still in slot 1.
        five, three = await asyncio.gather(send(5, 55), send(3, 34))
        assert five["ALL_CORRID"][0].tolist()[0] == 5
        assert three["ALL_CORRID"][0].tolist()[1] == 3
        for sid in (2, 3, 4, 5):
            await send(sid, 0, end=True)
    finally:
        await client.close()
    stats = _stats(url, "direct_x2")
    assert stats.inference_count == 4 + 1 + 1 + 1 + 2 + 4


async def test_backlog_waits_for_a_freed_slot(backlog_server: ServerProcess) -> None:
    """Five sequences on 4 slots: the batcher holds until the fifth is in the backlog, then
    runs the four as two full batches; the fifth's first response comes only after one of
    the four has ended, and every sum is exact."""
    url = backlog_server.url
    client = aioclient.InferenceServerClient(url)
    log: list[tuple[int | str, int]] = []
    values = {sid: [sid, 2 * sid, 3 * sid] for sid in (1, 2, 3, 4, 5)}
    try:
        tasks = []
        for sid, vals in values.items():
            tasks.append(asyncio.create_task(_run_sequence(client, "accum_x2", sid, vals, log=log)))
            await asyncio.sleep(0.1)
        runs = await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        await client.close()
    for (sid, vals), outputs in zip(values.items(), runs, strict=True):
        assert [int(o[0, 0]) for o in outputs] == _cumsum(vals), sid
    first_end = min(log.index((sid, 2)) for sid in (1, 2, 3, 4))
    assert log.index((5, 0)) > first_end, log
    stats = _stats(url, "accum_x2")
    assert stats.inference_count == 15
    assert _batches(stats).get(2, 0) >= 2


# ----------------------------------------------------------------------------- Oldest


async def test_oldest_batches_across_sequences(held_server: ServerProcess) -> None:
    """Oldest, max_batch_size 4, preferred 4: the four held starts make one batch of 4;
    later batches mix sequences but never hold two requests of one sequence."""
    url = held_server.url
    client = aioclient.InferenceServerClient(url)
    ids = [11, 12, 13, 14]
    try:

        async def sequence(sid: int, delay: float) -> list[dict[str, np.ndarray]]:
            await asyncio.sleep(delay)
            outs = []
            for i, (start, end) in enumerate(_flags(5)):
                result = await client.infer(
                    "oldest4",
                    _value(sid * 100 + i),
                    sequence_id=sid,
                    sequence_start=start,
                    sequence_end=end,
                )
                outs.append(_outputs(result))
            return outs

        runs = await asyncio.gather(*(sequence(sid, 0.05 * k) for k, sid in enumerate(ids)))
    finally:
        await client.close()
    for sid, outs in zip(ids, runs, strict=True):
        for i, (out, (start, end)) in enumerate(zip(outs, _flags(5), strict=True)):
            np.testing.assert_array_equal(out["OUTPUT"], [[sid * 100 + i]])
            np.testing.assert_array_equal(out["OUT_START"], [[int(start)]])
            np.testing.assert_array_equal(out["OUT_END"], [[int(end)]])
            np.testing.assert_array_equal(out["OUT_CORRID"], [[sid]])
            batch = out["ALL_CORRID"][0].tolist()
            assert sid in batch and len(set(batch)) == len(batch), batch
        assert sorted(outs[0]["ALL_CORRID"][0].tolist()) == ids  # the held first batch
        np.testing.assert_array_equal(outs[0]["ALL_START"], [[1, 1, 1, 1]])
    stats = _stats(url, "oldest4")
    assert stats.inference_count == 20
    batches = _batches(stats)
    assert batches.get(4, 0) >= 1
    assert sum(size * count for size, count in batches.items()) == 20
    assert stats.execution_count < 20


def test_oldest_never_puts_two_requests_of_a_sequence_in_one_batch(
    held_server: ServerProcess,
) -> None:
    """Two sequences pipelined on one stream (each sends all four requests at once): every
    execution takes at most one request per sequence, so 8 requests make 4 batches of 2."""
    url = held_server.url
    before = _stats(url, "oldest4")
    responses: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: responses.put((result, error)))
        for i, (start, end) in enumerate(_flags(4)):
            for sid in (201, 202):
                client.async_stream_infer(
                    "oldest4",
                    _value(sid * 10 + i),
                    request_id=f"{sid}-{i}",
                    sequence_id=sid,
                    sequence_start=start,
                    sequence_end=end,
                )
        got = {}
        for _ in range(8):
            result, error = responses.get(timeout=30)
            assert error is None, error
            got[result.get_response().id] = _outputs(result)
        client.stop_stream()
    for i, (start, _) in enumerate(_flags(4)):
        for sid in (201, 202):
            out = got[f"{sid}-{i}"]
            np.testing.assert_array_equal(out["OUTPUT"], [[sid * 10 + i]])
            np.testing.assert_array_equal(out["OUT_START"], [[int(start)]])
            batch = out["ALL_CORRID"][0].tolist()
            assert len(set(batch)) == len(batch), f"two requests of one sequence: {batch}"
            assert sorted(batch) == [201, 202]
    after = _stats(url, "oldest4")
    assert after.inference_count - before.inference_count == 8
    assert after.execution_count - before.execution_count == 4


# ----------------------------------------------------------------------------- idle timeout


def test_idle_sequence_is_released(server: ServerProcess) -> None:
    """max_sequence_idle_microseconds 300000: after idling, the sequence is gone (a request
    without START is refused), a new START with the same id works, and the idle sequence's
    slot goes to a backlogged sequence without any END."""
    with grpcclient.InferenceServerClient(server.url) as client:
        client.infer("echo_idle", _value(1), sequence_id=70, sequence_start=True)
        time.sleep(0.7)
        expect_error(
            lambda: client.infer("echo_idle", _value(2), sequence_id=70),
            INVALID,
            contains=[START_FLAG, "70"],
        )
        out = _outputs(client.infer("echo_idle", _value(3), sequence_id=70, sequence_start=True))
        np.testing.assert_array_equal(out["OUT_START"], [[1]])
        np.testing.assert_array_equal(out["OUTPUT"], [[3]])
        # One slot (max_batch_size 1, one instance): sequence 71 waits until 70 idles out.
        began = time.monotonic()
        out = _outputs(
            client.infer(
                "echo_idle", _value(4), sequence_id=71, sequence_start=True, sequence_end=True
            )
        )
        waited = time.monotonic() - began
        np.testing.assert_array_equal(out["OUT_CORRID"], [[71]])
        assert 0.15 < waited < 5, waited
        expect_error(
            lambda: client.infer("echo_idle", _value(5), sequence_id=70, sequence_end=True),
            INVALID,
            contains=[START_FLAG],
        )


# ----------------------------------------------------------------------------- errors


def test_missing_sequence_id(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    expect_error(
        lambda: client.infer("accum", _value(1)),
        INVALID,
        contains=["correlation ID", "'accum'"],
    )
    # tritonclient sends no flags without an id: a raw request carries START alone.
    request = service_pb2.ModelInferRequest(model_name="accum")
    request.parameters["sequence_start"].bool_param = True
    tensor = request.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1])
    tensor.contents.int_contents.append(1)
    with grpc_stub(server.url) as stub:
        expect_rpc_error(
            lambda: stub.ModelInfer(request, timeout=30),
            grpc.StatusCode.INVALID_ARGUMENT,
            contains=["correlation ID"],
        )


def test_unknown_sequence_without_start(client: grpcclient.InferenceServerClient) -> None:
    expect_error(
        lambda: client.infer("accum", _value(1), sequence_id=999_001),
        INVALID,
        contains=[START_FLAG, "999001", "'accum'"],
    )
    expect_error(
        lambda: client.infer("accum", _value(1), sequence_id="no-such", sequence_end=True),
        INVALID,
        contains=[START_FLAG],
    )


def test_second_start_for_live_sequence(client: grpcclient.InferenceServerClient) -> None:
    """As Triton: the live sequence ends early and the new START begins from the initial
    state in the same slot (a warning is logged); no error."""
    client.infer("accum", _value(5), sequence_id=41, sequence_start=True)
    restarted = client.infer("accum", _value(100), sequence_id=41, sequence_start=True)
    np.testing.assert_array_equal(restarted.as_numpy("OUTPUT"), [[100]])
    result = client.infer("accum", _value(6), sequence_id=41, sequence_end=True)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT"), [[106]])


def test_request_after_end_needs_start(client: grpcclient.InferenceServerClient) -> None:
    client.infer("accum", _value(5), sequence_id=42, sequence_start=True, sequence_end=True)
    expect_error(
        lambda: client.infer("accum", _value(1), sequence_id=42),
        INVALID,
        contains=[START_FLAG],
    )


def test_batch_size_two_is_refused(client: grpcclient.InferenceServerClient) -> None:
    expect_error(
        lambda: client.infer(
            "accum", _value(1, rows=2), sequence_id=43, sequence_start=True, sequence_end=True
        ),
        INVALID,
        "inference request to model 'accum' must specify batch-size 1 due to requirements "
        "of sequence batcher",
    )
    # The refused START registered nothing: the id starts normally.
    result = client.infer(
        "accum", _value(4), sequence_id=43, sequence_start=True, sequence_end=True
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT"), [[4]])


def test_sequence_parameters_of_the_wrong_type(server: ServerProcess) -> None:
    def raw(**params: Any) -> service_pb2.ModelInferRequest:
        request = service_pb2.ModelInferRequest(model_name="accum")
        for key, (kind, value) in params.items():
            setattr(request.parameters[key], kind, value)
        tensor = request.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1])
        tensor.contents.int_contents.append(1)
        return request

    with grpc_stub(server.url) as stub:
        expect_rpc_error(
            lambda: stub.ModelInfer(
                raw(sequence_id=("int64_param", 44), sequence_start=("int64_param", 1)),
                timeout=30,
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            contains=["sequence_start", "boolean"],
        )
        expect_rpc_error(
            lambda: stub.ModelInfer(
                raw(sequence_id=("double_param", 4.5), sequence_start=("bool_param", True)),
                timeout=30,
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            contains=["sequence_id"],
        )
        response = stub.ModelInfer(
            raw(
                sequence_id=("int64_param", 44),
                sequence_start=("bool_param", True),
                sequence_end=("bool_param", True),
            ),
            timeout=30,
        )
        assert np.frombuffer(response.raw_output_contents[0], dtype=np.int32).tolist() == [1]


# ----------------------------------------------------------------------------- streaming


def _stream(url: str, requests: Sequence[dict[str, Any]]) -> dict[str, tuple[Any, Any]]:
    """Send every request on one stream at once; responses by request id."""
    responses: queue.Queue[tuple[Any, Any]] = queue.Queue()
    got: dict[str, tuple[Any, Any]] = {}
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: responses.put((result, error)))
        for request in requests:
            client.async_stream_infer(**request)
        for _ in requests:
            result, error = responses.get(timeout=30)
            if error is not None:
                # tritonclient hands in-band errors to the callback without the result.
                got[f"error-{len(got)}"] = (None, error)
            else:
                got[result.get_response().id] = (result, None)
        client.stop_stream()
    return got


def test_sequences_over_a_stream(server: ServerProcess) -> None:
    """Three sequences interleaved and pipelined on one stream: exact sums."""
    values = {51: [1, 2, 3, 4], 52: [10, 20, 30, 40], 53: [7, 7, 7, 7]}
    requests = []
    for i, (start, end) in enumerate(_flags(4)):
        for sid, vals in values.items():
            requests.append(
                dict(
                    model_name="accum",
                    inputs=_value(vals[i]),
                    request_id=f"{sid}-{i}",
                    sequence_id=sid,
                    sequence_start=start,
                    sequence_end=end,
                )
            )
    got = _stream(server.url, requests)
    for sid, vals in values.items():
        sums = [int(got[f"{sid}-{i}"][0].as_numpy("OUTPUT")[0, 0]) for i in range(4)]
        assert sums == _cumsum(vals), sid


def test_bad_sequence_request_on_a_stream_is_an_in_band_error(server: ServerProcess) -> None:
    """A request for an unknown sequence without START fails alone; the stream goes on and
    the good sequence on it completes with exact sums."""
    good = dict(model_name="accum", sequence_id=61)
    requests = [
        dict(good, inputs=_value(1), request_id="a0", sequence_start=True),
        dict(model_name="accum", inputs=_value(9), request_id="bad", sequence_id=62),
        dict(good, inputs=_value(2), request_id="a1"),
        dict(model_name="accum", inputs=_value(9), request_id="no-id"),
        dict(good, inputs=_value(3), request_id="a2", sequence_end=True),
    ]
    got = _stream(server.url, requests)
    errors = [error for _, error in got.values() if error is not None]
    assert len(errors) == 2, got
    messages = sorted(str(e) for e in errors)
    assert any(START_FLAG in m for m in messages), messages
    assert any("correlation ID" in m for m in messages), messages
    sums = [int(got[f"a{i}"][0].as_numpy("OUTPUT")[0, 0]) for i in range(3)]
    assert sums == [1, 3, 6]
