"""The gateway's one gRPC channel to the service: its options, TLS, and the call that
keeps it connecting while the service is away.

With grpc's EventEngine client off (``__main__.py``), nothing polls the channel between
calls: a connection attempt progresses only while some thread waits on the channel.
Calls fail fast while the service is down (503 at once), so after such a failure one
background call that waits for readiness (``ServerLive``, ``wait_for_ready``) drives the
reconnection and ends as soon as the service answers, or the channel closes. (An idle
channel is still watched by grpc's backup poller, every 5 s, so a broken connection is
noticed and the next call connects afresh.)
"""

from __future__ import annotations

import logging
import threading
from typing import Any, cast

import grpc

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc

from .config import DEFAULT_KEEPALIVE_MS, GrpcTls

__all__ = ["ServiceChannel", "channel_options"]

log = logging.getLogger(__name__)


def channel_options(keepalive_ms: int = DEFAULT_KEEPALIVE_MS) -> list[tuple[str, Any]]:
    """Unlimited message sizes (the HTTP body limit applies first), a short reconnect
    backoff so the gateway finds a restarted service within about a second by itself
    (grpc also takes the minimum backoff as the time one connection attempt may take),
    and keepalive pings every ``keepalive_ms`` (config.py: how often the service lets
    them come)."""
    return [
        ("grpc.max_send_message_length", -1),
        ("grpc.max_receive_message_length", -1),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 5000),
        ("grpc.max_reconnect_backoff_ms", 1000),
        ("grpc.keepalive_time_ms", keepalive_ms),
        # No retry policy is configured, so the retry filter would only copy every call.
        ("grpc.enable_retries", 0),
        # Names the gateway's calls to the service (Triton's gRPC-only test hooks, such as
        # the response delay, leave HTTP alone: service/grpc_frontend/response_delay.py).
        ("grpc.primary_user_agent", "triton-rest-gateway"),
    ]


#: How long one waiting call lasts before the next one (the service still away).
_WAIT_SECONDS = 1.0


class ServiceChannel:
    """The channel, and at most one thread at a time waiting for it to be ready."""

    def __init__(
        self, target: str, tls: GrpcTls | None, keepalive_ms: int = DEFAULT_KEEPALIVE_MS
    ) -> None:
        options = channel_options(keepalive_ms)
        if tls is None:
            self.channel = grpc.insecure_channel(target, options=options)
        else:
            self.channel = grpc.secure_channel(target, _credentials(tls), options=options)
        self._ping = pb_grpc.GRPCInferenceServiceStub(self.channel).ServerLive
        self._lock = threading.Lock()
        self._waiting = False
        self._closed = False

    def reconnect(self) -> None:
        """Keep connection attempts going until the service answers (one thread)."""
        with self._lock:
            if self._waiting or self._closed:
                return
            self._waiting = True
        threading.Thread(target=self._wait_ready, name="grpc-reconnect", daemon=True).start()

    def _wait_ready(self) -> None:
        try:
            while not self._closed:
                try:
                    self._ping(pb.ServerLiveRequest(), wait_for_ready=True, timeout=_WAIT_SECONDS)
                    return
                except grpc.RpcError as exc:
                    if cast(grpc.Call, exc).code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                        return  # connected (any answer is one), or the channel closed
                except ValueError:  # the channel closed between two calls
                    return
        finally:
            with self._lock:
                self._waiting = False

    def close(self) -> None:
        """Calls still running fail at once (``Channel closed``)."""
        with self._lock:
            self._closed = True
        self.channel.close()


def _credentials(tls: GrpcTls) -> grpc.ChannelCredentials:
    """TLS to the service; the files are read once, at start (a missing one stops it)."""
    root = tls.root_cert.read_bytes() if tls.root_cert is not None else None
    cert = tls.client_cert.read_bytes() if tls.client_cert is not None else None
    key = tls.client_key.read_bytes() if tls.client_key is not None else None
    return grpc.ssl_channel_credentials(
        root_certificates=root, private_key=key, certificate_chain=cert
    )
