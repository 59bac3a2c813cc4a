"""The table of models: loading, reloading, unloading, polling, version lookup, readiness.

Model control follows Triton's three modes. Loads and unloads of one model are serialised
by a per-model lock; a reload builds the new versions completely before swapping them in,
so requests never see a half-loaded model, and the old versions finish what they accepted.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from inference import model_config_pb2 as mc

from ..errors import Internal, InvalidArgument, NotFound, Unavailable
from ..repository.config_file import ConfigError, read_config
from ..repository.ensemble_config import composing_models
from ..repository.layout import ModelDirectory, discover_models, fingerprint, model_directory
from ..repository.limits import ConfigLimits, check_config
from ..repository.staging import StagingArea, StagingFailure
from ..repository.version_policy import select_versions
from ..scheduling.ensemble import StepRunner
from ..scheduling.rate_limiter import RateLimiter
from .dependencies import dependency_waves, with_composing
from .index import IndexEntry, index_entries
from .loader import load_ensemble, load_version
from .model import ModelEntry, ModelState, ModelVersion

__all__ = ["DEFAULT_LOAD_THREADS", "ControlMode", "IndexEntry", "ModelManager"]

#: Triton's --model-load-thread-count default: models loading at once.
DEFAULT_LOAD_THREADS = 4

log = logging.getLogger(__name__)

NOT_ALLOWED = "explicit model load / unload is not allowed if polling is enabled"


class ControlMode(enum.Enum):
    NONE = "none"
    EXPLICIT = "explicit"
    POLL = "poll"


def _poll_failed(name: str, reason: str = "") -> str:
    """Triton's answer to a load of a model it cannot read (missing, bad config, sent files
    it cannot put in place). The reason is logged; a repository model's is shown by the
    index, sent files' (they have no index entry) follows Triton's text."""
    answer = f"failed to load '{name}', failed to poll from model repository"
    return f"{answer}: {reason}" if reason else answer


def _load_failed(name: str, entry: ModelEntry) -> str:
    """Triton's answer to a load whose versions failed, one clause per version."""
    if entry.reason:  # the model as a whole: no version to load
        return f"load failed for model '{name}': {entry.reason}\n"
    failed = sorted((v, m) for v, m in entry.versions.items() if not m.ready)
    clauses = "".join(f"version {v} is at {m.state.value} state: {m.reason};" for v, m in failed)
    return f"load failed for model '{name}': {clauses}\n"


class ModelManager:
    def __init__(
        self,
        repositories: Sequence[Path],
        *,
        mode: ControlMode = ControlMode.NONE,
        startup_models: Sequence[str] = (),
        limits: ConfigLimits | None = None,
        isolate: bool = False,
        load_threads: int = DEFAULT_LOAD_THREADS,
        load_retries: int = 0,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._repositories = list(repositories)
        # Versions load in these threads (--model-load-thread-count): that many models at
        # once; each model's own instances open in parallel too (loader._open_instances).
        self._loaders = ThreadPoolExecutor(max(1, load_threads), thread_name_prefix="model-load")
        self._load_retries = load_retries
        self._limiter = limiter
        self._limits = limits or ConfigLimits()
        self._isolate = isolate  # instances in worker processes (service/backends/isolated)
        self._mode = mode
        self._startup_models = list(startup_models)
        self._models: dict[str, ModelEntry] = {}
        self._unloaded: set[str] = set()
        self._loading: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._staging = StagingArea()
        self._runner: StepRunner | None = None
        # Called whenever the set of loaded versions may have changed (the engine then
        # sends its frontends a new snapshot of the models: core/checked.py).
        self.on_change: Callable[[], None] = lambda: None

    def attach_runner(self, runner: StepRunner) -> None:
        """Ensembles run their steps through the core's infer (set by the composition root)."""
        self._runner = runner

    @property
    def mode(self) -> ControlMode:
        return self._mode

    # --- start-up, polling, shutdown ----------------------------------------------------

    async def start(self) -> None:
        """Load what the control mode says to load at start-up."""
        directories = discover_models(self._repositories)
        names = list(directories)
        if self._mode is ControlMode.EXPLICIT and "*" not in self._startup_models:
            unknown = [n for n in self._startup_models if n not in directories]
            if unknown:
                raise ValueError(
                    "--load-model names models that no repository holds: " + ", ".join(unknown)
                )
            names = with_composing(list(dict.fromkeys(self._startup_models)), directories)
        for wave in dependency_waves({n: directories[n] for n in names}):
            await asyncio.gather(*(self._replace(directories[n]) for n in wave))

    async def poll(self) -> None:
        """One poll: load added models, reload changed ones, unload removed ones."""
        directories = discover_models(self._repositories)
        work = []
        for name, directory in directories.items():
            entry = self._models.get(name)
            if entry is None or entry.fingerprint != fingerprint(directory.path):
                work.append(self._locked_replace(directory))
        for name, entry in list(self._models.items()):
            if name not in directories and not entry.staged:
                work.append(self._locked_unload(name))
        await asyncio.gather(*work)

    async def poll_forever(self, interval_secs: float) -> None:
        while True:
            await asyncio.sleep(interval_secs)
            try:
                await self.poll()
            except Exception:  # a bad poll must never stop polling
                log.exception("repository poll failed")

    async def unload_all(self) -> None:
        await asyncio.gather(*(self._retire(e) for e in self._models.values()))
        self._staging.cleanup()

    # --- the model-repository API -------------------------------------------------------

    async def load(
        self,
        name: str,
        override: mc.ModelConfig | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        """Load or reload ``name``; on failure the previous versions keep serving."""
        if self._mode is not ControlMode.EXPLICIT:
            raise Unavailable(NOT_ALLOWED)
        if files and override is None:
            raise InvalidArgument(
                f"failed to load '{name}': the 'config' parameter must be provided with "
                "'file:' parameters, to serve as the model configuration"
            )
        if not files or (override is not None and override.platform == "ensemble"):
            await self._load_composing(name, override)
        async with self._lock(name):
            if files:
                try:
                    path = await asyncio.to_thread(self._staging.stage, name, files)
                except StagingFailure as exc:  # Triton's localize step fails, and its poll
                    log.error("poll failed for the files sent with model '%s': %s", name, exc)
                    raise Internal(_poll_failed(name, str(exc))) from None
                except ValueError as exc:
                    raise InvalidArgument(f"failed to load '{name}': {exc}") from None
                directory = model_directory(name, path, path.parent)
            else:
                directory = discover_models(self._repositories).get(name)  # type: ignore[assignment]
                if directory is None:
                    raise Internal(_poll_failed(name))
            entry = await self._replace(directory, override, staged=bool(files))
            if entry.reason and not entry.versionless:  # files or config: Triton's poll fails
                raise Internal(_poll_failed(name))
            if entry.failure:
                raise InvalidArgument(_load_failed(name, entry))

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        if self._mode is not ControlMode.EXPLICIT:
            raise Unavailable(NOT_ALLOWED)
        if name not in self._models and name not in discover_models(self._repositories):
            raise NotFound(f"failed to unload '{name}': no model '{name}' is known")
        if unload_dependents:
            for dependent in self.dependents(name):
                await self._locked_unload(dependent)
        await self._locked_unload(name)

    def dependents(self, name: str) -> list[str]:
        """Loaded ensembles that call ``name`` in one of their steps."""
        return [
            entry.name
            for entry in self._models.values()
            if any(name in composing_models(m.config) for m in entry.versions.values())
        ]

    def lookup_config(self, name: str, version: int) -> mc.ModelConfig | None:
        """A ready version's config (-1: latest), for ensemble validation."""
        model = self.find(name, "" if version < 0 else str(version))
        return model.config if model is not None else None

    def lookup_labels(self, name: str, version: int) -> dict[str, tuple[str, ...]]:
        """A ready version's classification labels (-1: latest), for an ensemble's outputs."""
        model = self.find(name, "" if version < 0 else str(version))
        return model.labels if model is not None else {}

    async def _load_composing(self, name: str, override: mc.ModelConfig | None) -> None:
        """Loading an ensemble loads the models it calls that are not loaded yet."""
        config = override
        if config is None:
            directory = discover_models(self._repositories).get(name)
            if directory is None or directory.error:
                return
            try:
                config = read_config(directory)
            except ConfigError:
                return
        if config.platform != "ensemble":
            return
        directories = discover_models(self._repositories)
        for model in composing_models(config):
            if model not in self._models and model in directories and model != name:
                await self._load_composing(model, None)
                await self._locked_replace(directories[model])

    def index(self, repository_name: str = "", ready_only: bool = False) -> list[IndexEntry]:
        repositories = self._repositories
        if repository_name:
            repositories = [r for r in repositories if repository_name in (r.name, str(r))]
            if not repositories:
                raise NotFound(f"unknown repository '{repository_name}'")
        on_disk = discover_models(repositories)
        names = sorted(set(on_disk) | ({*self._models} if not repository_name else set()))
        out: list[IndexEntry] = []
        for name in names:
            out.extend(
                index_entries(
                    name, self._models.get(name), name in self._loading, name in self._unloaded
                )
            )
        return [e for e in out if e.state == ModelState.READY.value] if ready_only else out

    # --- lookups for the request path ---------------------------------------------------

    def ready_versions(self, name: str) -> list[int]:
        entry = self._models.get(name)
        return entry.ready_versions() if entry is not None else []

    def entries(self) -> list[ModelEntry]:
        return list(self._models.values())

    def versionless(self) -> list[str]:
        """Models known but with no version to load (Triton's start-up table lists them)."""
        return sorted(name for name, entry in self._models.items() if entry.versionless)

    def all_ready(self) -> bool:
        return all(not entry.failure for entry in self._models.values())

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
            if name in self._unloaded:
                raise Unavailable(
                    f"Request for unknown model: '{name}' has no available versions: unloaded"
                )
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        if not version:  # the highest ready version; a loop, not a sort, per request
            latest = None
            for number, candidate in entry.versions.items():
                if candidate.ready and (latest is None or number > latest.version):
                    latest = candidate
            if latest is None:
                why = entry.failure
                raise Unavailable(
                    f"Request for unknown model: '{name}' has no available versions"
                    + (f": {why}" if why else "")
                )
            return latest
        try:
            number = int(version)
        except ValueError:
            raise InvalidArgument(
                f"failed to get model version from specified version string '{version}' "
                "(details: stol), version should be an integral value > 0"
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
                m for e in self._models.values() for _, m in sorted(e.versions.items()) if m.ready
            ]
        if version:
            return [self.get(name, version)]
        entry = self._models.get(name)
        if entry is None:
            self.get(name)  # raises the right error for unknown or unloaded models
        assert entry is not None
        ready = [entry.versions[v] for v in entry.ready_versions()]
        if not ready:
            raise Unavailable(f"Request for unknown model: '{name}' has no available versions")
        return ready

    def config(self, name: str, version: str = "") -> mc.ModelConfig:
        return self.get(name, version).config

    # --- internals ----------------------------------------------------------------------

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    async def _locked_replace(self, directory: ModelDirectory) -> None:
        async with self._lock(directory.name):
            await self._replace(directory)

    async def _locked_unload(self, name: str) -> None:
        async with self._lock(name):
            entry = self._models.pop(name, None)
            self._unloaded.add(name)
            self.on_change()
            if entry is not None:
                await self._retire(entry)
                log.info("unloaded '%s'", name)

    async def _replace(
        self,
        directory: ModelDirectory,
        override: mc.ModelConfig | None = None,
        staged: bool = False,
    ) -> ModelEntry:
        """Build a new entry; swap it in unless it failed while a working one serves."""
        name = directory.name
        self._loading.add(name)
        try:
            entry = await self._build(directory, override)
        finally:
            self._loading.discard(name)
        entry.staged = staged
        old = self._models.get(name)
        if entry.failure and old is not None and not old.failure:
            log.error(
                "reload of '%s' failed, previous versions keep serving: %s", name, entry.failure
            )
            await self._retire(entry)
            return entry
        self._models[name] = entry
        self._unloaded.discard(name)
        self.on_change()
        if old is not None:
            await self._retire(old)
        if staged and not entry.ready_versions():  # a failed load's staged copy goes now
            await asyncio.to_thread(self._staging.release, directory.path)
        return entry

    async def _build(
        self, directory: ModelDirectory, override: mc.ModelConfig | None
    ) -> ModelEntry:
        entry = ModelEntry(directory.name, directory)
        if directory.error:
            entry.reason = directory.error
            log.error("model '%s' unavailable: %s", directory.name, entry.reason)
            return entry
        try:
            entry.fingerprint = await asyncio.to_thread(fingerprint, directory.path)
            config = read_config(directory, override)
            check_config(config)
            versions = select_versions(config.version_policy, directory.versions)
        except ValueError as exc:
            entry.reason = str(exc)
            log.error("model '%s' unavailable: %s", directory.name, entry.reason)
            return entry
        if not versions:  # Triton's lifecycle refuses it as a load failure (INVALID_ARG)
            entry.versionless = True
            entry.reason = (
                "at least one version must be available under the version policy of "
                f"model '{directory.name}'"
            )
            log.error("failed to load model '%s': %s", directory.name, entry.reason)
            return entry
        if config.platform == "ensemble":
            if self._runner is None:
                raise RuntimeError("ensembles need a runner: call attach_runner first")
            loaded = [
                load_ensemble(
                    config,
                    v,
                    self.lookup_config,
                    self._runner,
                    self._limits,
                    model_dir=directory.path,
                    lookup_labels=self.lookup_labels,
                )
                for v in versions
            ]
        else:
            loop = asyncio.get_running_loop()
            loaded = await asyncio.gather(
                *(
                    loop.run_in_executor(
                        self._loaders,
                        functools.partial(
                            load_version,
                            config,
                            v,
                            directory.version_path(v),
                            self._limits,
                            self._isolate,
                            self._load_retries,
                            self._limiter,
                        ),
                    )
                    for v in versions
                )
            )
        entry.versions = {m.version: m for m in loaded}
        return entry

    async def _retire(self, entry: ModelEntry) -> None:
        """Stop taking requests, let accepted ones finish, free the instances, and remove
        the staged copy the entry was loaded from."""
        for model in entry.versions.values():
            if model.scheduler is not None:
                model.state = ModelState.UNLOADING
                await model.wait_unleased()
                await model.scheduler.stop()
                model.scheduler = None
            model.state = ModelState.UNAVAILABLE
            model.reason = model.reason or "unloaded"
        if entry.staged:
            await asyncio.to_thread(self._staging.release, entry.directory.path)
