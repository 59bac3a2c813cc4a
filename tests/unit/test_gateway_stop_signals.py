"""The gateway's stop: only a second signal stops it at once (``gateway/server.py``).

serve.sh signals the service and the gateway together, and the service's notice of its
stop may reach the gateway before its own SIGTERM: that signal is its first, and the
requests on its open connections are still served (decision 056).
"""

from __future__ import annotations

from typing import cast

from gateway.app import GatewayApp
from gateway.server import _Stop


class _App:
    def __init__(self) -> None:
        self.drains: list[float] = []

    def begin_drain(self, exit_timeout: float) -> None:
        self.drains.append(exit_timeout)


def _stop() -> tuple[_Stop, _App]:
    app = _App()
    return _Stop(cast(GatewayApp, app), 30.0), app


def test_the_services_notice_then_a_signal_is_no_forced_stop() -> None:
    stop, app = _stop()
    stop.begin(12.0)  # the service's notice, with its exit timeout
    stop()  # serve.sh's SIGTERM
    assert stop.requested.is_set() and not stop.forced.is_set()
    assert stop.seconds == 12.0 and app.drains == [12.0]


def test_a_second_signal_stops_at_once() -> None:
    stop, app = _stop()
    stop()
    stop.begin(12.0)  # the notice after the signal changes nothing
    assert not stop.forced.is_set() and stop.seconds == 30.0
    stop()
    assert stop.forced.is_set() and app.drains == [30.0]
