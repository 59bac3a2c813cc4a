"""``pb_utils.load_model``, ``unload_model`` and ``is_model_ready`` on the server's side.

A worker's ``control`` message (``bls_client.py``) runs on the core's loop as the same
call a client's repository request makes (explicit mode only, the same texts), and is
answered with one ``control_reply``; errors carry Triton's stub prefixes (python_backend
r24.10, model_loader.cc). As in Triton, an unload returns once it has started: a model
may unload another (or itself) from ``execute`` without waiting for its own request.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from ...errors import ServerError
from ...repository.load_parameters import config_override, file_contents
from .bls import Reply, installed_core

__all__ = ["serve_control"]

_PREFIXES = {
    "load": "Failed to load model: ",
    "unload": "Failed to unload model: ",
    "ready": "Failed to check model readiness: ",
}
_LEADING_INTEGER = re.compile(r"\s*[+-]?\d+")


def serve_control(reply: Reply, message: tuple[Any, ...]) -> None:
    """A worker's reader thread: run the call on the core's loop."""
    _, call_id, operation, args = message
    installed = installed_core()
    if installed is None:
        reply(("control_reply", call_id, None, "model control is not available"), None)
        return
    core, loop = installed
    asyncio.run_coroutine_threadsafe(_run(core, reply, call_id, operation, args), loop)


async def _run(core: Any, reply: Reply, call_id: int, operation: str, args: Any) -> None:
    result: Any = None
    error: str | None = None
    try:
        if operation == "load":
            name, config, files = args
            override = config_override(name, config) if config else None
            await core.load_model(name, override, file_contents(files) or None)
        elif operation == "unload":
            name, dependents = args
            unloading = asyncio.ensure_future(core.unload_model(name, dependents))
            await asyncio.sleep(0)  # its refusals come at once; the unload itself goes on
            if unloading.done():
                unloading.result()
        elif operation == "ready":
            name, version = args
            result = core.model_ready(name, _version(version))
        else:
            error = f"unknown model control call '{operation}'"
    except ServerError as exc:
        error = _PREFIXES.get(operation, "") + exc.message
    except ValueError as exc:
        error = _PREFIXES.get(operation, "") + str(exc)
    reply(("control_reply", call_id, result, error), None)


def _version(text: str) -> str:
    """Triton's GetModelVersionFromString: "" is the latest; else a non-negative integer
    (std::stol reads a leading one)."""
    if not text:
        return ""
    match = _LEADING_INTEGER.match(text)
    if match is None:
        raise ValueError(
            f"failed to get model version from specified version string '{text}' (details: "
            "stol), version should be an integral value > 0"
        )
    version = int(match.group())
    if version < 0:
        raise ValueError(
            f"failed to get model version from specified version string '{text}', version "
            "should be an integral value > 0"
        )
    return str(version)
