"""The gateway follows the service's stop: one private call held open on the channel.

Triton stops its HTTP endpoint first when it is signalled, and our HTTP endpoint is this
separate process, which the signal may not reach (Triton's qa signals the server's one
pid; ``scripts/serve.sh`` signals both). So a thread holds one call of the service's
``triton_gateway.GatewayLink/Follow`` (``service/grpc_frontend/gateway_link.py``) open:
the service's notice ``{"stop": seconds}`` starts the gateway's own stop with that exit
timeout, and once its HTTP connections are gone (or the timeout spent) the gateway
answers ``{"left": seconds, "cut": n}``, the time the service's core stop then gets and
the requests the spent timeout cut off (work left: the service exits 1, as Triton). All along it
says whether it holds HTTP connections (``{"busy": 1}`` / ``{"busy": 0}``, as the call
starts and at each change, ``set_busy``): a stop signalled while no gateway holds any
refuses new requests at once, with nothing to wait for here (``service/admission.py``).

Raw bytes, JSON both ways. The call is made again a second after it ends (the service
restarted, or not up yet); a service without the method (UNIMPLEMENTED) is not asked
again.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import cast

import grpc

from wire import gateway_link

__all__ = ["ServiceLink"]

log = logging.getLogger(__name__)

_RETRY_S = 1.0
#: After the report: how long the service gets to end the call (it has read the report).
_REPORT_WAIT_S = 1.0


def _identity(data: bytes) -> bytes:
    return data


class ServiceLink:
    """``start`` the following thread; ``on_stop(seconds)`` runs (once) when the service
    stops; ``report(left)`` answers it once the HTTP endpoint has stopped;
    ``set_busy`` tells it whether HTTP connections are open (until the first call,
    the service counts this gateway as holding some)."""

    def __init__(self, channel: grpc.Channel, on_stop: Callable[[float], None]) -> None:
        self._follow = channel.stream_stream(
            gateway_link.PATH, request_serializer=_identity, response_deserializer=_identity
        )
        self._on_stop = on_stop
        self._outbox: queue.SimpleQueue[bytes | None] | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()  # reported, or closed: no new call
        self._ended = threading.Event()  # the call in progress ended
        #: The service has the call: its stop will be told (set once, never cleared).
        self.linked = threading.Event()
        self.noticed = False
        self._busy = True

    def start(self, wait: float) -> None:
        """Follow from now on; wait up to ``wait`` seconds for the service to take the
        call, so that a stop signalled just after the gateway's start is not missed (a
        service that is down costs that wait, once)."""
        threading.Thread(target=self._run, name="service-link", daemon=True).start()
        self.linked.wait(wait)

    def set_busy(self, busy: bool) -> None:
        """Whether HTTP connections are open now; the call in progress carries each
        change (``HttpServer.watch_connections`` calls this, in order)."""
        with self._lock:
            if busy == self._busy:
                return
            self._busy = busy
            if self._outbox is not None and not self._done.is_set():
                self._outbox.put(gateway_link.encode(gateway_link.BUSY, int(busy)))

    def report(self, left: float, cut: int = 0) -> None:
        """The HTTP endpoint has stopped with ``left`` seconds of the exit timeout, and
        ``cut`` requests in flight cut off as it was spent: tell the service, if it asked
        (work left at the exit timeout: it exits 1), and give it a moment to read it. No
        new call after."""
        with self._lock:
            self._done.set()
            outbox = self._outbox if self.noticed else None
        if outbox is None:
            return
        outbox.put(gateway_link.report(left, cut))
        outbox.put(None)  # then the half-close
        self._ended.wait(_REPORT_WAIT_S)

    def close(self) -> None:
        self._done.set()

    def _run(self) -> None:
        while not self._done.is_set():
            if not self._follow_once():
                return
            self._done.wait(_RETRY_S)

    def _follow_once(self) -> bool:
        """One call until it ends; False when no further call is worth making."""
        outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        with self._lock:
            if self._done.is_set():
                return False
            self._outbox = outbox
            self._ended.clear()
            outbox.put(gateway_link.encode(gateway_link.BUSY, int(self._busy)))

        def requests() -> Iterator[bytes]:
            # Busy or not, the report, until None: after the report, or the call ended.
            while (frame := outbox.get()) is not None:
                yield frame

        try:
            call = self._follow(requests(), wait_for_ready=True)
            call.initial_metadata()  # sent by the service as it takes the call
            self.linked.set()
            for frame in call:
                seconds = gateway_link.seconds(frame, gateway_link.STOP)
                if seconds is not None and not self.noticed:
                    with self._lock:
                        self.noticed = True
                    self._on_stop(seconds)
        except grpc.RpcError as exc:
            code = cast(grpc.Call, exc).code()
            if code == grpc.StatusCode.UNIMPLEMENTED:
                log.info("the service does not tell its stop: this gateway stops on its signal")
                return False
            log.debug("link to the service ended: %s", code)
        except ValueError:  # the channel was closed (the gateway is exiting)
            return False
        finally:
            outbox.put(None)
            self._ended.set()
        return True
