"""What a Python model's BLS requests and model-control calls see of the core
(``backends/python/bls.py``, ``model_control.py``).

The requests of a model already executing, like an ensemble's steps: they run through the
called model's scheduler as a client's request would, and on during a drain (the request
that makes them is in flight), so they go through the ensembles' step runner.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from inference import model_config_pb2 as mc

from ..errors import ServerError
from ..scheduling.ensemble import StepRunner
from ..telemetry.spans import bls_trace
from ..telemetry.tracing import Tracing
from ..types import InferRequest, InferResponse
from .inference_server import InferenceServer

__all__ = ["BlsCore"]


class BlsCore:
    def __init__(self, server: InferenceServer, runner: StepRunner, tracing: Tracing) -> None:
        self._server = server
        self._runner = runner
        self._tracing = tracing

    def decoupled(self, name: str, version: str) -> bool | None:
        """Whether the ready version is decoupled; None when none is ready."""
        if not self._server.model_ready(name, version):
            return None
        try:
            config = self._server.model_config(name, version)
        except ServerError:  # unloaded in between
            return None
        return config.model_transaction_policy.decoupled

    async def stream_infer(
        self, request: InferRequest, trace_context: str = ""
    ) -> AsyncIterator[InferResponse]:
        """The request's responses; a span of its own under the traced request whose
        ``request.trace()`` the model passed (Triton's child trace)."""
        traced = bls_trace(self._tracing, request, trace_context)
        if traced is None:
            async for response in self._runner.stream_infer(request):
                yield response
            return
        with traced:
            async for response in self._runner.stream_infer(request, traced.record):
                traced.sent(response)
                yield response

    async def load_model(
        self, name: str, override: mc.ModelConfig | None, files: dict[str, bytes] | None
    ) -> None:
        await self._server.load_model(name, override, files)

    async def unload_model(self, name: str, unload_dependents: bool) -> None:
        await self._server.unload_model(name, unload_dependents)

    def model_ready(self, name: str, version: str) -> bool:
        return self._server.model_ready(name, version)
