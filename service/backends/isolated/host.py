"""The worker of one isolated model instance: ``python -m service.backends.isolated.host FD ...``.

It opens the instance with the real backend (``open``), runs each batch the engine sends
(``execute``: answered with the outputs and the run's start and end, which the engine's
statistics take as the model's compute) and closes it (``close``), one message at a
time: the engine (its loop, or the instance's thread) sends a batch and waits for its
answer, so there is never more than one. Inputs arrive as views of the engine's shared
region and outputs leave through this worker's own (``protocol.Channel``). The implicit
state of a stateful model's sequences lives here (``HeldStates``): only its shapes go
back to the engine. Log records made here (ONNX Runtime's provider line, say) ride back
with each answer and are emitted by the engine, under its log settings and format. The
worker exits when the engine's end of the socket closes or its parent changes, so it
never outlives the server.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from inference import model_config_pb2 as mc

from ...errors import ServerError
from ...scheduling.sequence.held import HeldStates
from ..base import HeldRows, InstanceSpec, ModelInstance
from ..python.protocol import Channel, ChannelClosed
from ..python.stub_runtime import hard_exit, watch_parent
from ..registry import get_backend

__all__ = ["main"]


class _Records(logging.Handler):
    """Keeps this worker's log records, made picklable, until the next answer."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args = record.getMessage(), None
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        self.records.append(record)

    def take(self) -> list[logging.LogRecord]:
        records, self.records = self.records, []
        return records


def _error(exc: BaseException) -> tuple[str, str, str | None]:
    """(class name, message, failure reason): the engine raises the same error again."""
    if isinstance(exc, ServerError):
        return type(exc).__name__, exc.message, exc.failure
    return type(exc).__name__, str(exc), None


class Host:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.records = _Records()
        logging.getLogger().addHandler(self.records)
        logging.getLogger().setLevel(logging.INFO)
        self.instance: ModelInstance | None = None
        self.model: tuple[mc.ModelConfig, Path] | None = None  # config, model folder
        self._states: HeldStates | None = None  # made by the first stateful batch

    def serve(self) -> None:
        while True:
            try:
                message, fd = self.channel.recv()
            except ChannelClosed:
                hard_exit(0)
            tag = message[0]
            if tag == "execute":
                self._execute(message, fd)
            elif tag == "open":
                self._open(message)
            elif tag == "close":
                if self.instance is not None:
                    self.instance.close()
                self.channel.send(("closed", self.records.take()))
                hard_exit(0)

    def _open(self, message: tuple[Any, ...]) -> None:
        _, backend_name, config_bytes, version_path, spec = message
        try:
            config = mc.ModelConfig.FromString(config_bytes)
            self.model = (config, Path(version_path).parent)
            opened = get_backend(backend_name).open(config, Path(version_path), spec)
            assert isinstance(spec, InstanceSpec)
            if not callable(getattr(opened, "execute", None)):
                raise ValueError(f"backend '{backend_name}' has no tensor instances to isolate")
            self.instance = opened  # type: ignore[assignment]
            reply: tuple[Any, ...] = ("opened", self.records.take(), opened.signature())
        except Exception as exc:
            reply = ("error", self.records.take(), *_error(exc))
        self.channel.send(reply)

    def held_states(self) -> HeldStates:
        """The sequences' implicit state, made when the first stateful batch comes."""
        if self._states is None:
            assert self.model is not None, "execute before open"
            self._states = HeldStates(*self.model)
        return self._states

    def _execute(self, message: tuple[Any, ...], fd: int | None) -> None:
        """``("execute", refs, region, outputs[, rows])``: with ``rows`` (a sequence batch)
        the input states come from, and the output states stay in, ``held_states``."""
        _, refs, region, outputs, *stateful = message
        packed = None
        try:
            (named,) = self.channel.unpack([refs], region, fd)
            assert self.instance is not None, "execute before open"
            inputs, run_outputs = dict(named), outputs
            if stateful:
                held, rows = self.held_states(), stateful[0]
                states, lost = held.inputs(rows)
                inputs.update(states)
                run_outputs = held.run_outputs(outputs)
            start = time.monotonic_ns()
            results = self.instance.execute(inputs, run_outputs)
            end = time.monotonic_ns()
            del named, inputs  # the engine's region is free for reuse once no view is left
            report: list[HeldRows] = []
            if stateful:
                report.append(held.keep(results, rows, lost))
                results = {name: results[name] for name in outputs}
            packed = self.channel.pack([list(results.items())])
            del results
            refs, region = packed.refs[0], packed.region
            reply: tuple[Any, ...] = (
                "done",
                self.records.take(),
                refs,
                region,
                start,
                end,
                *report,
            )
        except Exception as exc:
            reply = ("error", self.records.take(), *_error(exc))
            packed = None
        try:
            self.channel.send(reply, None if packed is None else packed.fd)
        finally:
            if packed is not None and packed.fd is not None:
                os.close(packed.fd)


def main() -> None:
    fd, inline_limit, pool_bytes = (int(arg) for arg in sys.argv[1:4])
    threading.Thread(target=watch_parent, args=(os.getppid(),), daemon=True).start()
    channel = Channel(socket.socket(fileno=fd), inline_limit, pool_bytes)
    Host(channel).serve()


if __name__ == "__main__":
    main()
