"""Decoupled Python models: responses stream to the request's sender as they are sent,
from execute or from the model's own threads, and cancellation reaches the model."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from python_models.harness import Collector, load_config, open_one, request, run

from service.backends.base import BackendRequest


@pytest.fixture
def stream() -> Iterator[Any]:
    instance = open_one(load_config("stream"))
    yield instance
    instance.close()


def _stream(count: int, delay_ms: int, **parameters: Any) -> BackendRequest:
    req = request(COUNT=np.array([count], np.int32), DELAY_MS=np.array([delay_ms], np.int32))
    req.parameters = dict(parameters)
    return req


def _values(sender: Collector) -> list[int]:
    return [int(out["OUT"][0]) for out in sender.outputs]


def test_responses_sent_from_a_thread_after_execute_returned(stream: Any) -> None:
    start = time.monotonic()
    first, second, empty = run(stream, _stream(5, 40), _stream(3, 40), _stream(0, 0))
    assert time.monotonic() - start < 0.15  # execute returned before the streams ended
    for sender, count in ((first, 5), (second, 3), (empty, 0)):
        sender.wait()
        assert _values(sender) == list(range(count))
        assert [r.final for r in sender.responses] == [False] * count + [True]
        assert sender.responses[-1].outputs is None  # the final flag travels alone
        assert all(r.error is None for r in sender.responses)


def test_responses_sent_from_execute_arrive_as_they_are_sent(stream: Any) -> None:
    (sender,) = run(stream, _stream(4, 100, inline=True))
    assert sender.done  # execute streamed everything before returning
    assert _values(sender) == [0, 1, 2, 3]
    gaps = np.diff(sender.arrived[:4])
    assert all(gap > 0.05 for gap in gaps), gaps  # one by one, not in a burst at the end


def test_the_model_sees_cancellation_and_stops(stream: Any) -> None:
    (sender,) = run(stream, _stream(50, 30))
    deadline = time.monotonic() + 5
    while len(sender.responses) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    sender.cancel()
    sender.wait()
    values = _values(sender)
    assert values[-1] == -1  # the model's own "I saw the cancellation" response
    assert values[:-1] == list(range(len(values) - 1))
    assert len(values) < 20
    assert sender.responses[-1].final


def test_many_concurrent_streams_on_one_instance(stream: Any) -> None:
    senders = [run(stream, _stream(8, 5))[0] for _ in range(10)]
    for sender in senders:
        assert _values(sender.wait()) == list(range(8))


def test_a_worker_killed_mid_stream_ends_the_stream_with_an_error(stream: Any) -> None:
    (sender,) = run(stream, _stream(100, 20))
    while not sender.responses:
        time.sleep(0.005)
    old = stream.worker_pid
    os.kill(old, signal.SIGKILL)
    sender.wait()
    last = sender.responses[-1]
    assert last.final and "model 'stream'" in (last.error or "")
    assert "SIGKILL" in (last.error or "")
    (again,) = run(stream, _stream(2, 0))
    assert _values(again.wait()) == [0, 1]
    assert stream.worker_pid != old
