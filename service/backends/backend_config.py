"""``--backend-config``: Triton's per-backend command-line settings, and the model settings
that the start-up flags give every load (auto-complete on or off).

Triton hands each backend the global settings (``--backend-config=<key>=<value>``, no
backend name) overlaid by its own (``--backend-config=<backend>,<key>=<value>``), plus
``default-max-batch-size`` (4 unless set), the ``max_batch_size`` auto-complete gives a
model that can batch. A backend checks its keys when it is first used, so a bad value
fails the loads of that backend's models with the backend's text (python's below).

The engine process installs the server's values once (``configure``, from ``Runtime``)
before any model loads; loads read them with ``current``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_MAX_BATCH_SIZE",
    "KNOWN_BACKENDS",
    "BackendConfig",
    "configure",
    "current",
    "from_flags",
    "parse_backend_config",
]

log = logging.getLogger(__name__)

#: Triton's default for ``default-max-batch-size``.
DEFAULT_MAX_BATCH_SIZE = 4

#: Backends this server has: their keys are read; any other backend's are accepted and
#: warned about once.
KNOWN_BACKENDS = ("python", "onnxruntime", "identity", "repeat", "square")

#: Keys each backend of ours reads (beyond the global ``default-max-batch-size``).
_READ_KEYS = {
    "python": (
        "shm-default-byte-size",
        "shm-growth-byte-size",
        "stub-timeout-seconds",
        "shm_message_queue_size",
        "thread-pool-size",
        "shm-region-prefix-name",
        "backend-directory",
    ),
}


def parse_backend_config(text: str) -> tuple[str, str, str]:
    """Triton's ``ParseBackendConfigOption``: ``<backend>,<key>=<value>`` or
    ``<key>=<value>`` (global); ValueError with Triton's text."""
    comma = text.find(",")
    equals = text.find("=", comma + 1)
    if comma == 0:
        raise ValueError(
            "No backend specified. --backend-config option format is "
            "<backend name>,<setting>=<value> or <setting>=<value>. Got " + text
        )
    format_error = (
        "--backend-config option format is '<backend name>,<setting>=<value>'. Got " + text
    )
    if equals < 0:
        raise ValueError(format_error)
    name = text[:comma] if comma > 0 else ""
    setting, value = text[comma + 1 : equals], text[equals + 1 :]
    if not setting or not value:
        raise ValueError(format_error)
    return name, setting, value


@dataclass(frozen=True)
class BackendConfig:
    """(backend or "" for global, key, value) in command-line order, and auto-complete."""

    settings: tuple[tuple[str, str, str], ...] = ()
    auto_complete: bool = True  # --disable-auto-complete-config / --strict-model-config

    def for_backend(self, backend: str) -> dict[str, str]:
        """What Triton hands ``backend``: global settings, then its own over them (a
        repeated key: the last one)."""
        merged = {key: value for name, key, value in self.settings if name == ""}
        merged.update({key: value for name, key, value in self.settings if name == backend})
        return merged

    def default_max_batch_size(self, backend: str) -> int:
        """``default-max-batch-size`` for ``backend``'s auto-complete; ValueError when the
        value is not a number (``std::stoi``'s refusal, as the backends report it)."""
        text = self.for_backend(backend).get("default-max-batch-size")
        if text is None:
            return DEFAULT_MAX_BATCH_SIZE
        try:
            return max(0, int(text.strip()))
        except ValueError:
            raise ValueError(
                f"failed to parse 'default-max-batch-size' backend config '{text}'"
            ) from None

    def refusal(self) -> str | None:
        """Triton's start-up refusal of a TensorFlow version other than 2 (core's
        ``backend_config.cc``); None when the settings are usable."""
        version = self.for_backend("tensorflow").get("version")
        if not any(name == "tensorflow" for name, _, _ in self.settings) or version is None:
            return None
        if version == "1":
            return (
                "starting from 23.04, Triton no longer supports Tensorflow 1. "
                "Please switch to Tensorflow 2."
            )
        if version != "2":
            return f"unexpected TensorFlow library version '{version}', expects 2."
        return None

    def notes(self) -> list[str]:
        """One line per backend we do not have (accepted, no effect) and per key of ours
        that nothing reads."""
        lines = []
        foreign = sorted({n for n, _, _ in self.settings if n and n not in KNOWN_BACKENDS})
        for name in foreign:
            keys = ", ".join(k for n, k, _ in self.settings if n == name)
            lines.append(
                f"--backend-config for backend '{name}' ({keys}) has no effect here: "
                "this server has no such backend"
            )
        for name, key, _ in self.settings:
            read = (*_READ_KEYS.get(name, ()), "default-max-batch-size")
            if name in KNOWN_BACKENDS and key not in read:
                lines.append(
                    f"--backend-config {name},{key} has no effect here: the {name} "
                    "backend reads no such setting"
                )
        return lines


_current = BackendConfig()


def configure(config: BackendConfig) -> None:
    """Install the server's settings (engine process, before any load)."""
    global _current
    _current = config


def current() -> BackendConfig:
    return _current


def from_flags(specs: Sequence[str], auto_complete: bool) -> BackendConfig:
    """ValueError with Triton's ``Bad option: "--backend-config".`` text."""
    settings = []
    for spec in specs:
        try:
            settings.append(parse_backend_config(spec))
        except ValueError as exc:
            raise ValueError(f'Bad option: "--backend-config".\n{exc}') from None
    return BackendConfig(tuple(settings), auto_complete)
