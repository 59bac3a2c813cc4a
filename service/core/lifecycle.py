"""The table of models: loading the repositories, version lookup, readiness, unloading."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inference import model_config_pb2 as mc

from ..errors import InvalidArgument, NotFound, Unavailable
from ..repository.config_file import read_config
from ..repository.layout import ModelDirectory, discover_models
from ..repository.version_policy import select_versions
from .loader import load_version
from .model import ModelState, ModelVersion

__all__ = ["ModelEntry", "ModelManager"]

log = logging.getLogger(__name__)


@dataclass
class ModelEntry:
    """A model name and its versions; ``reason`` is set when the model as a whole failed."""

    name: str
    directory: ModelDirectory
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    reason: str = ""

    def ready_versions(self) -> list[int]:
        return sorted(v for v, m in self.versions.items() if m.ready)


class ModelManager:
    def __init__(self, repositories: Sequence[Path]) -> None:
        self._repositories = list(repositories)
        self._models: dict[str, ModelEntry] = {}

    async def load_all(self) -> None:
        directories = discover_models(self._repositories)
        await asyncio.gather(*(self._load(d) for d in directories.values()))

    async def _load(self, directory: ModelDirectory) -> None:
        entry = ModelEntry(directory.name, directory)
        self._models[directory.name] = entry
        if directory.error:
            entry.reason = directory.error
            log.error("model '%s' unavailable: %s", directory.name, entry.reason)
            return
        try:
            config = read_config(directory)
            versions = select_versions(config.version_policy, directory.versions)
            if not versions:
                raise ValueError(
                    f"at least one version must be available under the version policy of "
                    f"model '{directory.name}'"
                )
        except ValueError as exc:
            entry.reason = str(exc)
            log.error("model '%s' unavailable: %s", directory.name, entry.reason)
            return
        loaded = await asyncio.gather(
            *(
                asyncio.to_thread(load_version, config, v, directory.version_path(v))
                for v in versions
            )
        )
        entry.versions = {m.version: m for m in loaded}

    async def unload_all(self) -> None:
        for entry in self._models.values():
            for model in entry.versions.values():
                if model.scheduler is not None:
                    model.state = ModelState.UNLOADING
                    await model.scheduler.stop()
                    model.scheduler = None
                model.state = ModelState.UNAVAILABLE
                model.reason = "unloaded"

    def entries(self) -> list[ModelEntry]:
        return list(self._models.values())

    def all_ready(self) -> bool:
        return all(
            not entry.reason and entry.versions and all(m.ready for m in entry.versions.values())
            for entry in self._models.values()
        )

    def find(self, name: str, version: str = "") -> ModelVersion | None:
        """The requested version, or None where it is unknown or not ready."""
        try:
            return self.get(name, version)
        except (NotFound, Unavailable, InvalidArgument):
            return None

    def get(self, name: str, version: str = "") -> ModelVersion:
        """A ready version; the error names what is wrong, in Triton's words."""
        entry = self._models.get(name)
        if entry is None:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        if not version:
            ready = entry.ready_versions()
            if not ready:
                raise Unavailable(
                    f"Request for unknown model: '{name}' has no available versions"
                    + self._why(entry)
                )
            return entry.versions[ready[-1]]
        try:
            number = int(version)
        except ValueError:
            raise InvalidArgument(
                f"Request for unknown model: '{name}' version '{version}' is not a valid version"
            ) from None
        model = entry.versions.get(number)
        if model is None:
            raise NotFound(f"Request for unknown model: '{name}' version {number} is not found")
        if not model.ready:
            raise Unavailable(
                f"Request for unknown model: '{name}' version {number} is not at ready state"
                + (f": {model.reason}" if model.reason else "")
            )
        return model

    def loaded(self, name: str = "", version: str = "") -> list[ModelVersion]:
        """Ready versions for statistics: all models, one model, or one version of it."""
        if not name:
            if version:
                raise InvalidArgument("a model version was given without a model name")
            return [
                m for e in self._models.values() for v, m in sorted(e.versions.items()) if m.ready
            ]
        if version:
            return [self.get(name, version)]
        entry = self._models.get(name)
        if entry is None:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        ready = [entry.versions[v] for v in entry.ready_versions()]
        if not ready:
            raise Unavailable(f"Request for unknown model: '{name}' has no available versions")
        return ready

    def config(self, name: str, version: str = "") -> mc.ModelConfig:
        return self.get(name, version).config

    @staticmethod
    def _why(entry: ModelEntry) -> str:
        if entry.reason:
            return f": {entry.reason}"
        reasons = [
            f"version {v}: {m.reason}" for v, m in sorted(entry.versions.items()) if m.reason
        ]
        return (": " + "; ".join(reasons)) if reasons else ""
