"""BLS on the server's side: a Python model's own requests, run by the core like any other.

A worker's ``bls`` message (``bls_client.py``) arrives on its reader thread; the request
it carries goes to the core on the engine's loop (``install``), through the called
model's scheduler (batching, sequences, statistics as for a client's request), and each
response goes back to the worker as a ``bls_response``. The input tensors stay where the
worker wrote them (views of its shared region) until the request is done.

Error texts are Triton's (python_backend r24.10, request_executor.cc): what the core
refuses before the request runs, and the BLS rules (a model not ready, a decoupled model
without ``decoupled=True``), read ``Model M - Error when running inference: ...``; an
error the called model answers with comes back as it is.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import numpy as np

from inference import model_config_pb2 as mc
from wire import datatypes

from ...errors import ServerError
from ...types import FINAL_FLAG, InferRequest, InferResponse, InputTensor, RequestedOutput
from .protocol import Channel
from .triton_python_backend_utils import BlsTarget

__all__ = ["Core", "install", "installed_core", "serve_bls"]

log = logging.getLogger(__name__)

#: Asks the core for every response of a decoupled model, its empty final one included.
_ENABLE_EMPTY_FINAL = "triton_enable_empty_final_response"
_FLAG_START, _FLAG_END = 1, 2


class Core(Protocol):
    def decoupled(self, name: str, version: str) -> bool | None:
        """Whether the ready version is decoupled; None when no such version is ready."""
        ...

    def stream_infer(
        self, request: InferRequest, trace_context: str = ""
    ) -> AsyncIterator[InferResponse]:
        """Every response of ``request``, raising ServerError for a failed one; traced as
        a child of ``trace_context`` when it is a traced request's."""
        ...

    async def load_model(
        self, name: str, override: mc.ModelConfig | None, files: dict[str, bytes] | None
    ) -> None: ...

    async def unload_model(self, name: str, unload_dependents: bool) -> None: ...

    def model_ready(self, name: str, version: str) -> bool: ...


_installed: tuple[Core, asyncio.AbstractEventLoop] | None = None


def installed_core() -> tuple[Core, asyncio.AbstractEventLoop] | None:
    return _installed


def install(core: Core | None, loop: asyncio.AbstractEventLoop | None = None) -> None:
    """The core that runs BLS requests, and the loop it runs on (None: BLS unavailable)."""
    global _installed
    _installed = (core, loop or asyncio.get_running_loop()) if core is not None else None


#: Sends one message (and a descriptor) to the worker that asked.
Reply = Callable[[tuple[Any, ...], int | None], None]


def _request(
    target: BlsTarget, tensors: list[tuple[str, np.ndarray]], bf16: set[str]
) -> InferRequest:
    """The core's request for a BLS request: its flags, correlation ID and timeout become
    the parameters a client would send for them."""
    parameters: dict[str, Any] = json.loads(target.parameters or "{}")
    if target.correlation_id not in (0, ""):
        parameters["sequence_id"] = target.correlation_id
    if target.flags & _FLAG_START:
        parameters["sequence_start"] = True
    if target.flags & _FLAG_END:
        parameters["sequence_end"] = True
    if target.timeout:
        parameters["timeout"] = target.timeout
    inputs = [
        InputTensor(
            name,
            "BF16" if name in bf16 else datatypes.datatype_of(array.dtype) or str(array.dtype),
            tuple(array.shape),
            contents=array.reshape(-1),
        )
        for name, array in tensors
    ]
    version = "" if target.model_version < 0 else str(target.model_version)
    return InferRequest(
        target.model_name,
        version,
        target.request_id,
        inputs,
        [RequestedOutput(name) for name in target.requested_outputs],
        parameters,
    )


def serve_bls(channel: Channel, reply: Reply, message: tuple[Any, ...], fd: int | None) -> None:
    """A worker's reader thread: start the BLS request in ``message`` on the core's loop."""
    _, bls_id, decoupled, target, refs, region, bf16 = message
    (tensors,) = channel.unpack([refs], region, fd)
    installed = _installed
    if installed is None:
        _answer(channel, reply, bls_id, None, "BLS is not available in this process", True)
        return
    core, loop = installed
    request = _request(target, tensors, set(bf16))
    del tensors
    asyncio.run_coroutine_threadsafe(
        _run(core, channel, reply, bls_id, bool(decoupled), request, target.trace_context), loop
    )


async def _run(
    core: Core,
    channel: Channel,
    reply: Reply,
    bls_id: int,
    decoupled: bool,
    request: InferRequest,
    trace_context: str,
) -> None:
    name = request.model_name
    refused = f"Model {name} - Error when running inference: "
    target_decoupled = core.decoupled(name, request.model_version)
    if target_decoupled is None:
        failure = f"Failed for execute the inference request. Model '{name}' is not ready."
        _answer(channel, reply, bls_id, None, refused + failure, True)
        return
    if target_decoupled and not decoupled:
        _answer(
            channel,
            reply,
            bls_id,
            None,
            refused + f"Model {name} is using the decoupled. The current BLS request call "
            "doesn't support models using the decoupled transaction policy. Please use "
            "'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled "
            "models.'",
            True,
        )
        return
    if target_decoupled:
        request.parameters[_ENABLE_EMPTY_FINAL] = True
    answered = ended = False
    try:
        # Read to the stream's end even after the final response: leaving it early
        # would count the request as cancelled.
        async for response in core.stream_infer(request, trace_context):
            answered = True
            if not ended:
                ended = not target_decoupled or response.parameters.get(FINAL_FLAG) is True
                _answer(channel, reply, bls_id, response, None, ended)
    except ServerError as exc:
        # Refused before it ran (no failure counted): Triton's core refuses it inside
        # the call that submits it, which the python backend prefixes; a failure of the
        # model itself is its response's error.
        text = exc.message if exc.failure is not None or answered else refused + exc.message
        _answer(channel, reply, bls_id, None, text, True)
        return
    except Exception as exc:
        log.exception("BLS request to model '%s' failed", name)
        _answer(channel, reply, bls_id, None, f"{refused}{exc}", True)
        return
    if not ended:  # a stream that ended without a final response
        _answer(channel, reply, bls_id, None, None, True)


def _answer(
    channel: Channel,
    reply: Reply,
    bls_id: int,
    response: InferResponse | None,
    error: str | None,
    final: bool,
) -> None:
    outputs = response.outputs if response is not None else []
    named = [(o.name, o.array) for o in outputs]
    bf16 = [o.name for o in outputs if o.datatype == "BF16"]
    try:
        packed = channel.pack([named])
    except Exception as exc:  # e.g. no memory for the shared region
        packed, error = channel.pack([[]]), f"could not pass the BLS response: {exc}"
    try:
        message = ("bls_response", bls_id, packed.refs[0], packed.region, error, final, bf16)
        reply(message, packed.fd)
    except OSError:
        pass  # the worker is gone; nobody waits for this answer
    finally:
        if packed.fd is not None:
            os.close(packed.fd)
