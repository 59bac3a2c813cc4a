"""The generate endpoints' one ModelStreamInfer call, answered with Triton's rules.

``/generate`` collects the responses: exactly one is the answer (a model error included);
any other count is ``{"error": "generate expects model to produce exactly 1 response,
..."}``. ``/generate_stream`` sends each response as a server-sent event as it comes, an
error response as ``data: {"error": ...}``. In both, the status is decided by the first
response (200, or the error's status), as Triton starts its chunked answer there.

A request the service refuses before any inference (bad inputs, unknown model, queue
full) is not a response in Triton but an error answer (``application/json``). In-band
stream errors carry only a message, so the gateway asks the service (gRPC metadata
``gateway-error-codes``) to name each error's status in the ``error_code`` parameter of
its response: a model's error response is INTERNAL, a refusal anything else.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc

from .errors import GatewayError, http_status, rpc_error
from .generate import dumps, event, render_generate
from .messages import HttpResponse

if TYPE_CHECKING:
    from .spans import RequestSpan

__all__ = ["ERROR_CODES_METADATA", "ERROR_CODE_PARAMETER", "EVENT_STREAM", "GenerateCall"]

#: Asks the service to name the gRPC status of each in-band stream error ...
ERROR_CODES_METADATA = ("gateway-error-codes", "1")
#: ... in this (string) parameter of the error's response, e.g. "INVALID_ARGUMENT".
ERROR_CODE_PARAMETER = "error_code"

EVENT_STREAM = (b"content-type", b"text/event-stream; charset=utf-8")
_NOT_ONE = (
    "generate expects model to produce exactly 1 response, use generate stream for model "
    "that generates various number of responses"
)


@dataclass(frozen=True, slots=True)
class _Item:
    """One response of the stream, or an error (``refused``: before any inference)."""

    response: pb.ModelInferResponse | None
    error: str = ""
    status: int = 200
    refused: bool = False


def _error_item(reply: pb.ModelStreamInferResponse) -> _Item:
    param = reply.infer_response.parameters.get(ERROR_CODE_PARAMETER)
    name = param.string_param if param is not None else ""
    code = grpc.StatusCode.__members__.get(name, grpc.StatusCode.INTERNAL)
    refused = code != grpc.StatusCode.INTERNAL
    return _Item(None, reply.error_message, http_status(code), refused)


class GenerateCall:
    """The RPC, started at once; ``collect()`` or ``stream()`` answers the request."""

    def __init__(
        self,
        stub: pb_grpc.GRPCInferenceServiceStub,
        request: pb.ModelInferRequest,
        metadata: tuple[tuple[str, str], ...],
        target: str,
        on_unavailable: Callable[[], None] | None = None,
    ) -> None:
        self._target = target
        self._on_unavailable = on_unavailable
        self._call: Any = stub.ModelStreamInfer(
            iter([request]), metadata=(*metadata, ERROR_CODES_METADATA)
        )

    def _items(self) -> Generator[_Item, None, None]:
        """The responses as they come; a failed RPC is a last (refused) error; closing
        this iterator cancels the RPC."""
        try:
            for reply in self._call:
                if reply.error_message:
                    yield _error_item(reply)
                else:
                    yield _Item(reply.infer_response)
        except grpc.RpcError as exc:
            error = rpc_error(exc, self._target)
            if error.status == 503 and self._on_unavailable is not None:
                self._on_unavailable()
            yield _Item(None, error.message, error.status, refused=True)
        finally:
            self._call.cancel()

    def collect(self, trace: RequestSpan | None) -> HttpResponse:
        """``/generate``: the one response as a JSON object."""
        items = list(self._items())
        status = items[0].status if items else 200
        started = time.time_ns() if trace is not None else 0
        if len(items) != 1:
            body = dumps({"error": _NOT_ONE})
        elif items[0].response is None:
            body = dumps({"error": items[0].error})
        else:
            body = dumps(render_generate(items[0].response))
        if trace is not None:
            trace.phase("translate_response", started)
        return HttpResponse(status, body)

    def stream(self) -> HttpResponse:
        """``/generate_stream``: server-sent events, or a JSON error if the request was
        refused before it ran."""
        items = self._items()
        first = next(items, None)
        if first is not None and first.refused:
            items.close()
            raise GatewayError(first.status, first.error)
        status = 200 if first is None else first.status
        head = [] if first is None else [first]
        return HttpResponse(status, headers=[EVENT_STREAM], stream=_events(head, items))


def _events(head: list[_Item], rest: Generator[_Item, None, None]) -> Generator[bytes, None, None]:
    try:
        for item in itertools.chain(head, rest):
            if item.response is None:
                yield event({"error": item.error})
            else:
                yield event(render_generate(item.response))
    except GatewayError as exc:  # an output JSON cannot carry
        yield event({"error": exc.message})
    finally:
        rest.close()
