"""Triton's rate limiter (``scheduling/rate_limiter.py``): limits, Triton's refusals, and
the turn order under contention. End to end (two Python models on a real server, the
reference Triton's figures) in tests/integration/test_rate_limiter.py."""

from __future__ import annotations

import threading
import time

import pytest
from google.protobuf import text_format

from inference import model_config_pb2 as mc
from service.scheduling.rate_limiter import RateLimiter

FOUR = 'resources [{ name: "resource1" count: 4 }]'
TWO_AND_GLOBAL = (
    'resources [{ name: "resource1" count: 2 }, { name: "resource2" global: true count: 2 }] '
    "priority: 2"
)


def config(text: str) -> mc.ModelRateLimiter:
    return text_format.Parse(text, mc.ModelRateLimiter())


def test_without_explicit_counts_the_largest_need_is_available() -> None:
    limiter = RateLimiter()
    limiter.register("a_0", config(FOUR), 0)
    limiter.register("b_0", config(TWO_AND_GLOBAL), 0)
    a = limiter.register("a_1", config(FOUR), 1)
    with limiter.hold(a):  # device 1 has its own resource1
        pass


def test_explicit_counts_refuse_an_instance_that_could_never_run() -> None:
    limiter = RateLimiter([("resource1", 1, -1)])
    with pytest.raises(ValueError) as caught:
        limiter.register("a_0", config(FOUR), 0)
    assert str(caught.value) == (
        'Resource count for "resource1" is limited to 1 which will prevent scheduling of one '
        "or more model instances, the minimum required count is 4"
    )
    # A count given for another device leaves this one with none; the global resource
    # is reported first, as Triton's map orders it.
    elsewhere = RateLimiter([("resource1", 10, 10), ("resource1", 4, -1)])
    with pytest.raises(ValueError, match='"resource2" is limited to 0'):
        elsewhere.register("b_0", config(TWO_AND_GLOBAL), 0)


def test_a_name_both_global_and_per_device_is_refused() -> None:
    limiter = RateLimiter()
    limiter.register("b_0", config(TWO_AND_GLOBAL), 0)
    with pytest.raises(ValueError) as caught:
        limiter.register("c_0", config('resources [{ name: "resource2" count: 1 }]'), 0)
    assert str(caught.value) == (
        'Resource "resource2" is present as both global and device-specific resource in the '
        "model configuration."
    )
    limiter.register("d_0", config(FOUR), 0)  # the refused one left nothing behind


def test_priority_two_gets_half_the_turns_under_contention() -> None:
    """Two instances that cannot run together (4 + 2 > 4 of resource1): the priority-1
    one runs twice as often as the priority-2 one (Triton 2.51: 1.9 on the same pair)."""
    limiter = RateLimiter([("resource1", 4, -1), ("resource2", 2, -1)])
    reservations = {
        "a": limiter.register("a_0", config(FOUR), 0),
        "b": limiter.register("b_0", config(TWO_AND_GLOBAL), 0),
    }
    runs = {"a": 0, "b": 0}
    stop = threading.Event()

    def run(name: str) -> None:
        while not stop.is_set():
            with limiter.hold(reservations[name]):
                runs[name] += 1
                time.sleep(0.002)

    threads = [threading.Thread(target=run, args=(name,)) for name in runs]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join()
    assert runs["b"] > 10
    assert abs(runs["a"] / runs["b"] - 2.0) < 0.3, runs


def test_instances_sharing_nothing_do_not_wait_for_each_other() -> None:
    limiter = RateLimiter()
    a = limiter.register("a_0", config(FOUR), 0)
    b = limiter.register("b_0", config('resources [{ name: "other" count: 1 }]'), 0)
    with limiter.hold(a):
        done = threading.Event()
        threading.Thread(target=lambda: (limiter.hold(b).__enter__(), done.set())).start()
        assert done.wait(2.0)
