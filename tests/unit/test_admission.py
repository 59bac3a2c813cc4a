"""The refusal flags a stop signal raises in the process that takes it, and that the core
reads in another (``service/admission.py``): raised at once unless a REST gateway holds
HTTP connections, the lame duck holding back only the unary ones, and shared with
spawned processes as the supervisor shares them with the engine and the frontends."""

from __future__ import annotations

import multiprocessing

import pytest
from test_validation import BATCHED, FakeModels, FakeScheduler, good_inputs, make_version, request

from service.admission import Admission
from service.core.inference_server import STOPPING, InferenceServer
from service.errors import Unavailable


def test_a_signal_with_no_gateway_holding_connections_refuses_everything() -> None:
    admission = Admission(slots=2)
    assert not admission.streams_refused and not admission.unary_refused
    assert admission.signalled(lame_duck=False)
    assert admission.streams_refused and admission.unary_refused


def test_the_lame_duck_holds_back_only_the_unary_refusal() -> None:
    admission = Admission()
    assert admission.signalled(lame_duck=True)
    assert admission.streams_refused and not admission.unary_refused
    admission.refuse_all()  # its end (runtime.lame_duck)
    assert admission.unary_refused


def test_a_gateway_holding_connections_leaves_the_refusals_to_the_core_stop() -> None:
    """Triton's HTTP step comes first (decision 033): nothing is refused yet."""
    admission = Admission(slots=3)
    admission.set_busy(2, 1)
    assert admission.busy() == 1
    assert not admission.signalled(lame_duck=False)
    assert not admission.streams_refused and not admission.unary_refused
    admission.set_busy(2, 0)  # its gateway closed its last connection
    assert admission.busy() == 0
    assert admission.signalled(lame_duck=False)
    assert admission.unary_refused


def test_flags_raised_in_a_spawned_process_are_seen_here() -> None:
    """The supervisor's handler raises them; the engine, another process, reads them."""
    context = multiprocessing.get_context("spawn")
    admission = Admission(slots=2, context=context)
    admission.set_busy(1, 0)
    child = context.Process(target=admission.signalled, args=(False,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert admission.streams_refused and admission.unary_refused


async def test_the_core_refuses_from_the_moment_the_flags_are_raised() -> None:
    """No call on the core: the flags alone (raised by another process) refuse new
    requests and make it not ready."""
    admission = Admission()
    scheduler = FakeScheduler()
    server = InferenceServer(
        FakeModels(make_version(BATCHED, scheduler)),  # type: ignore[arg-type]
        admission=admission,
    )
    assert server.is_ready()
    admission.signalled(lame_duck=False)
    assert not server.is_ready()
    with pytest.raises(Unavailable) as streamed:
        server.stream_infer(request(good_inputs(), id="late"))
    assert streamed.value.message == f"[request id: late] {STOPPING}"
    with pytest.raises(Unavailable) as unary:
        await server.infer(request(good_inputs(), id="later"))
    assert unary.value.message == f"[request id: later] {STOPPING}"
    assert scheduler.jobs == []
