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
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from inference import model_config_pb2 as mc

from ..errors import Internal, InvalidArgument, NotFound, ServerError, Unavailable
from ..repository.config_file import ConfigError, read_config
from ..repository.ensemble_config import ConfigLookup, composing_models
from ..repository.layout import (
    ModelDirectory,
    discover_models,
    fingerprint,
    model_directory,
    model_key,
)
from ..repository.limits import ConfigLimits, check_config
from ..repository.staging import StagingArea, StagingFailure
from ..repository.version_policy import missing_versions, select_versions
from ..scheduling.ensemble import StepRunner
from ..scheduling.rate_limiter import RateLimiter
from ..scheduling.sequence.batcher import SequenceBatchScheduler
from .dependencies import callers, dependency_waves, unused_composing, with_composing
from .index import IndexEntry, index_entries
from .instance_update import hand_over, instance_only_change, let_go, update_instances
from .loader import LabelLookup, load_ensemble, load_version
from .model import ModelEntry, ModelState, ModelVersion
from .namespaces import (
    ambiguous,
    identifier_not_found,
    keys_named,
    unknown_name,
    unlinked_ensemble,
)

__all__ = ["DEFAULT_LOAD_THREADS", "ControlMode", "IndexEntry", "ModelManager"]

#: Triton's --model-load-thread-count default: models loading at once.
DEFAULT_LOAD_THREADS = 4

log = logging.getLogger(__name__)

NOT_ALLOWED = "explicit model load / unload is not allowed if polling is enabled"


def version_number(version: str) -> int:
    """A request's version string as Triton's frontend reads it (``std::stol``)."""
    try:
        return int(version)
    except ValueError:
        raise InvalidArgument(
            f"failed to get model version from specified version string '{version}' "
            "(details: stol), version should be an integral value > 0"
        ) from None


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


def _explicit_after(new: ModelEntry, old: ModelEntry | None, explicit: bool) -> bool:
    """Whether a model (re)loaded into ``new`` counts as loaded by name, as Triton keeps
    its explicitly_load_: a load of a model it already has, unchanged (same files, no
    config given now or before), leaves the flag as it was, so a composing model named
    in a later load still goes with its ensemble; a changed one is explicit if either
    load was."""
    if old is None:
        return explicit
    unchanged = (
        new.fingerprint == old.fingerprint
        and new.override is None
        and old.override is None
        and not new.staged
    )
    return old.explicit if unchanged else explicit or old.explicit


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
        namespacing: bool = False,
    ) -> None:
        self._repositories = list(repositories)
        # --model-namespacing: a model is known by its repository and name (its key,
        # layout.model_key), so one name may be in several repositories; a request names
        # only the model, and is refused when that name is ambiguous (core/namespaces.py).
        self._namespacing = namespacing
        # Versions load in these threads (--model-load-thread-count): that many models at
        # once; each model's own instances open in parallel too (loader._open_instances).
        self._loaders = ThreadPoolExecutor(max(1, load_threads), thread_name_prefix="model-load")
        self._load_retries = load_retries
        self._limiter = limiter
        self._limits = limits or ConfigLimits()
        self._isolate = isolate  # instances in worker processes (service/backends/isolated)
        self._mode = mode
        self._startup_models = list(startup_models)
        self._models: dict[str, ModelEntry] = {}  # by key: the name, unless namespacing
        # Triton's global map: model name -> keys in the table; a name once known keeps
        # its (then empty) set, which Triton's lookups tell from a name never known.
        self._names: dict[str, set[str]] = {}
        # Unloaded models, with the versions they had: Triton keeps an unloaded model's
        # versions (UNAVAILABLE, "unloaded") in its index and in its answers.
        self._unloaded: dict[str, tuple[int, ...]] = {}
        # Ensembles an unload took out because a model they call went (Triton keeps their
        # nodes, missing that upstream): each is loaded again, as it was, once every model
        # it calls is back; an unload or load of it by name forgets it here.
        self._waiting: dict[str, ModelEntry] = {}
        self._loading: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._staging = StagingArea()
        self._runner: StepRunner | None = None
        # Versions an instance-group update replaced, finishing their requests in the
        # background, by model key: a later retirement of that model waits for them
        # first (their workers may still run on the instances it closes).
        self._retiring: dict[asyncio.Task[None], str] = {}
        # ...and, for each, what tells it to stop waiting for its sequences in progress
        # (set when a later retirement of that model starts).
        self._hurry: dict[asyncio.Task[None], asyncio.Event] = {}
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
        directories = self._discover()
        keys = list(directories)
        named = keys
        if self._mode is ControlMode.EXPLICIT and "*" not in self._startup_models:
            unknown = [n for n in self._startup_models if not keys_named(directories, n)]
            if unknown:
                raise ValueError(
                    "--load-model names models that no repository holds: " + ", ".join(unknown)
                )
            named = [k for n in self._startup_models for k in keys_named(directories, n)]
            keys = with_composing(list(dict.fromkeys(named)), directories)
        for wave in dependency_waves({k: directories[k] for k in keys}):
            await asyncio.gather(
                *(self._replace(directories[k], explicit=k in named) for k in wave)
            )

    async def poll(self) -> None:
        """One poll: load added models, reload changed ones, unload removed ones."""
        directories = self._discover()
        work: list[Coroutine[Any, Any, object]] = []
        for key, directory in directories.items():
            entry = self._models.get(key)
            if entry is None or entry.fingerprint != fingerprint(directory.path):
                work.append(self._locked_replace(directory))
        for key, entry in list(self._models.items()):
            if key not in directories and not entry.staged:
                work.append(self._locked_unload(key))
        await asyncio.gather(*work)
        await self._relink()

    async def poll_forever(self, interval_secs: float) -> None:
        while True:
            await asyncio.sleep(interval_secs)
            try:
                await self.poll()
            except Exception:  # a bad poll must never stop polling
                log.exception("repository poll failed")

    async def unload_all(self) -> None:
        await asyncio.gather(*(self._retire(e) for e in self._models.values()), *self._retiring)
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
        try:
            if not files or (override is not None and override.platform == "ensemble"):
                await self._load_composing(name, override)
            if not self._namespacing or files:  # sent files: no namespace (Triton)
                await self._load_one(name, override, files)
            else:
                await self._load_named(name, override)
        finally:  # what came in may complete ensembles an unload took out
            await self._restore_waiting()
            await self._relink()

    async def _load_one(
        self, name: str, override: mc.ModelConfig | None, files: Mapping[str, bytes] | None
    ) -> None:
        """``load`` of the one model of that name (a model loaded from sent files has no
        namespace: Triton's identifier for it is its name alone)."""
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
                directory = self._discover().get(name)  # type: ignore[assignment]
                if directory is None:
                    raise Internal(_poll_failed(name))
            entry = await self._replace(directory, override, staged=bool(files))
            if entry.reason and not entry.versionless and not entry.unlinked:
                raise Internal(_poll_failed(name))  # files or config: Triton's poll fails
            if entry.failure:
                raise InvalidArgument(_load_failed(name, entry))

    async def _load_named(self, name: str, override: mc.ModelConfig | None) -> None:
        """``load`` with namespacing: the model of that name in every repository that has
        one (Triton polls the name in each), ``override`` applying to all of them."""
        directories = [d for d in self._discover().values() if d.name == name]
        if not directories:
            raise Internal(_poll_failed(name))
        entries = await asyncio.gather(*(self._locked_replace(d, override) for d in directories))
        if any(e.reason and not e.versionless and not e.unlinked for e in entries):
            raise Internal(_poll_failed(name))
        failed = "".join(_load_failed(e.key, e) for e in entries if e.failure)
        if failed:
            raise InvalidArgument(failed)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        if self._mode is not ControlMode.EXPLICIT:
            raise Unavailable(NOT_ALLOWED)
        if not self._namespacing:
            if name not in self._models and name not in self._discover():
                raise NotFound(f"failed to unload '{name}': no model '{name}' is known")
            keys = [name]
        else:  # every model of that name (Triton unloads each identifier of the name)
            keys = sorted(self._names.get(name, ()))
            if not keys and not keys_named(self._discover(), name):
                raise NotFound(f"failed to unload '{name}': no model '{name}' is known")
        calls = {key: self._call_keys(entry) for key, entry in self._models.items()}
        # Ensembles waiting for a model still call theirs (Triton keeps those edges).
        waiting = {key: self._call_keys(entry) for key, entry in self._waiting.items()}
        removed = list(keys)
        if unload_dependents:  # the composing models nothing else needs go too
            known = self._models | self._waiting
            explicit = {key for key, entry in known.items() if entry.explicit}
            removed += unused_composing(keys, calls | waiting, explicit)
        # Whatever the flag, the ensembles left without a step go first, and wait.
        for key in callers(removed, calls):
            entry = self._models.get(key)
            await self._locked_unload(key)
            if entry is not None and not entry.staged:  # a staged copy goes with it
                self._waiting[key] = entry
        for key in removed:
            await self._locked_unload(key)
        await self._relink()

    async def _restore_waiting(self) -> None:
        """Load again each ensemble an unload took out whose models are all back, with
        the config and flag it had, callees before callers (Triton re-checks a missing
        node's downstreams when a model of that name is added)."""
        while True:
            back = [
                (key, entry)
                for key, entry in self._waiting.items()
                if all(
                    callee in self._models and self._models[callee].ready_versions()
                    for callee in self._call_keys(entry)
                )
            ]
            if not back:
                return
            for key, entry in back:
                del self._waiting[key]
                log.info("loading '%s' again: the models it calls are back", key)
                await self._locked_replace(entry.directory, entry.override, explicit=entry.explicit)

    def _call_keys(self, entry: ModelEntry) -> list[str]:
        """The keys of the models an ensemble calls (its steps' links with namespacing)."""
        if not self._namespacing:
            return list(entry.calls)
        steps = entry.steps or {}
        return [model_key(ns, name) for name, ns in steps.items() if ns is not None]

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
        directories = self._discover()
        configs = [override] if override is not None else []
        if override is None:  # the model of that name in every repository (namespacing)
            for key in keys_named(directories, name):
                directory = directories[key]
                if directory.error:
                    continue
                try:
                    configs.append(read_config(directory))
                except ConfigError:
                    continue
        for config in configs:
            if config.platform != "ensemble":
                continue
            for model in composing_models(config):
                for key in keys_named(directories, model):
                    if key not in self._models and model != name:
                        await self._load_composing(model, None)
                        await self._locked_replace(directories[key], explicit=False)

    def index(self, repository_name: str = "", ready_only: bool = False) -> list[IndexEntry]:
        repositories = self._repositories
        if repository_name:
            repositories = [r for r in repositories if repository_name in (r.name, str(r))]
            if not repositories:
                raise NotFound(f"unknown repository '{repository_name}'")
        on_disk = self._discover(repositories)
        keys = set(on_disk) | ({*self._models} if not repository_name else set())

        def identifier(key: str) -> tuple[str, str]:  # Triton lists them in this order
            found = on_disk.get(key)
            directory = found if found is not None else self._models[key].directory
            return directory.namespace, directory.name

        out: list[IndexEntry] = []
        for namespace, name in sorted(identifier(k) for k in keys):
            key = model_key(namespace, name)
            out.extend(
                index_entries(
                    name, self._models.get(key), key in self._loading, self._unloaded.get(key)
                )
            )
        return [e for e in out if e.state == ModelState.READY.value] if ready_only else out

    # --- lookups for the request path ---------------------------------------------------

    def ready_versions(self, name: str) -> list[int]:
        try:
            entry = self._models.get(self._resolve(name))
        except ServerError:
            return []
        return entry.ready_versions() if entry is not None else []

    def entries(self) -> list[ModelEntry]:
        return list(self._models.values())

    def versionless(self) -> list[str]:
        """Models known but with no version to load (Triton's start-up table lists them)."""
        return sorted(name for name, entry in self._models.items() if entry.versionless)

    def all_ready(self) -> bool:
        return all(not entry.failure for entry in self._models.values())

    def find(
        self, name: str, version: str = "", namespace: str | None = None
    ) -> ModelVersion | None:
        """The requested version, or None where it is unknown or not ready."""
        try:
            return self.get(name, version, namespace)
        except (NotFound, Unavailable, InvalidArgument):
            return None

    def _resolve(self, name: str, namespace: str | None = None) -> str:
        """The key of the model a request names: its name, or with namespacing the one
        model of that name (``namespace``: an ensemble's step, linked at load time)."""
        if not self._namespacing:
            return name
        if namespace is not None:
            return model_key(namespace, name)
        keys = self._names.get(name)
        if keys is None:
            raise InvalidArgument(unknown_name(name))
        if not keys:
            raise NotFound(identifier_not_found(name))
        if len(keys) > 1:
            raise InvalidArgument(ambiguous(name, len(keys)))
        return next(iter(keys))

    def was_served(self, name: str) -> bool:
        """Whether ``name`` is loaded or was unloaded (not merely unknown)."""
        try:
            key = self._resolve(name)
        except ServerError:
            return False
        return key in self._models or key in self._unloaded

    def get(self, name: str, version: str = "", namespace: str | None = None) -> ModelVersion:
        """A ready version; the error names what is wrong, in Triton's words.
        ``namespace``: with --model-namespacing, the repository of an ensemble's step."""
        key = self._resolve(name, namespace)
        entry = self._models.get(key)
        # Triton's ModelLifeCycle::GetModel: the latest asked for and none ready is
        # NOT_FOUND; a version it holds that is not ready (failed, loading, unloaded) is
        # UNAVAILABLE; why it is not ready is in the index and the log, not here.
        if entry is None and key not in self._unloaded:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        if not version:  # the highest ready version; a loop, not a sort, per request
            latest = None
            for number, candidate in entry.versions.items() if entry is not None else ():
                if candidate.ready and (latest is None or number > latest.version):
                    latest = candidate
            if latest is None:
                raise NotFound(f"Request for unknown model: '{name}' has no available versions")
            return latest
        number = version_number(version)
        model = entry.versions.get(number) if entry is not None else None
        if model is None and (entry is not None or number not in self._unloaded[key]):
            raise NotFound(f"Request for unknown model: '{name}' version {number} is not found")
        if model is None or not model.ready:
            raise Unavailable(
                f"Request for unknown model: '{name}' version {number} is not at ready state"
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
        # TRITONSERVER_ServerModelStatistics: a name without a ready version (unknown,
        # unloaded, failed) or a version that is not ready is an invalid argument.
        try:
            entry = self._models.get(self._resolve(name))
        except ServerError:
            entry = None
        ready = entry.ready_versions() if entry is not None else []
        if entry is None or not ready:
            raise InvalidArgument(f"requested model '{name}' is not available")
        if not version:
            return [entry.versions[v] for v in ready]
        if version_number(version) not in ready:
            raise InvalidArgument(f"requested model version is not available for model '{name}'")
        return [entry.versions[version_number(version)]]

    def config(self, name: str, version: str = "") -> mc.ModelConfig:
        return self.get(name, version).config

    # --- internals ----------------------------------------------------------------------

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _discover(self, repositories: Sequence[Path] | None = None) -> dict[str, ModelDirectory]:
        chosen = self._repositories if repositories is None else repositories
        return discover_models(chosen, self._namespacing)

    async def _locked_replace(
        self,
        directory: ModelDirectory,
        override: mc.ModelConfig | None = None,
        explicit: bool = True,
    ) -> ModelEntry:
        async with self._lock(directory.key):
            return await self._replace(directory, override, explicit=explicit)

    async def _locked_unload(self, key: str) -> None:
        async with self._lock(key):
            entry = self._models.pop(key, None)
            self._waiting.pop(key, None)
            versions = tuple(sorted(entry.versions)) if entry is not None else ()
            self._unloaded[key] = versions or self._unloaded.get(key, ())
            if entry is not None:
                self._names.get(entry.name, set()).discard(key)
            self.on_change()
            if entry is not None:
                await self._retire(entry)
                log.info("unloaded '%s'", key)

    async def _relink(self) -> None:
        """With namespacing: rebuild the ensembles whose steps would now resolve to other
        models (one of that name came or went), as Triton's dependency graph reconnects
        and reloads them; the models themselves are not touched."""
        if not self._namespacing:
            return
        stale = [
            entry
            for entry in self._models.values()
            if entry.steps is not None
            and not entry.staged
            and entry.steps != self._link(entry.directory.namespace, list(entry.steps))
        ]
        for entry in stale:
            log.info("relinking ensemble '%s': its composing models changed", entry.key)
        await asyncio.gather(*(self._relink_one(e) for e in stale))

    async def _relink_one(self, entry: ModelEntry) -> None:
        """Rebuild, and swap in even when it fails: the steps it ran are gone (Triton's
        reconnected node fails, and its old versions stop serving)."""
        async with self._lock(entry.key):
            await self._replace(
                entry.directory, entry.override, swap_failed=True, explicit=entry.explicit
            )

    def _link(self, namespace: str, names: list[str]) -> dict[str, str | None]:
        """Where an ensemble of ``namespace`` finds each composing model: in its own
        repository first, else the one model of that name (None: none, or ambiguous),
        as Triton's DependencyGraph::ConnectDependencyGraph finds it."""
        linked: dict[str, str | None] = {}
        for name in names:
            if model_key(namespace, name) in self._models:
                linked[name] = namespace
                continue
            keys = self._names.get(name, set())
            only = next(iter(keys)) if len(keys) == 1 else None
            linked[name] = self._models[only].directory.namespace if only is not None else None
        return linked

    async def _replace(
        self,
        directory: ModelDirectory,
        override: mc.ModelConfig | None = None,
        staged: bool = False,
        swap_failed: bool = False,
        explicit: bool = True,
    ) -> ModelEntry:
        """Build a new entry; swap it in unless it failed while a working one serves
        (``swap_failed``: even then). ``explicit``: loaded by name, not only as a
        composing model (``_explicit_after`` says what the entry keeps)."""
        key = directory.key
        self._loading.add(key)
        old = self._models.get(key)
        try:
            entry = await self._build(directory, override, None if staged else old)
        finally:
            self._loading.discard(key)
        entry.staged = staged
        entry.override = override
        entry.explicit = _explicit_after(entry, old, explicit)
        if entry.failure and old is not None and not old.failure and not swap_failed:
            log.error(
                "reload of '%s' failed, previous versions keep serving: %s", key, entry.failure
            )
            await self._retire(entry)
            return entry
        self._models[key] = entry
        self._waiting.pop(key, None)
        self._names.setdefault(directory.name, set()).add(key)
        self._unloaded.pop(key, None)
        self.on_change()
        if old is not None and entry.in_place:
            await self._retire_updated(old, entry)
        elif old is not None:
            await self._retire(old)
        if staged and not entry.ready_versions():  # a failed load's staged copy goes now
            await asyncio.to_thread(self._staging.release, directory.path)
        return entry

    async def _retire_updated(self, old: ModelEntry, entry: ModelEntry) -> None:
        """The versions an instance-group update replaced: their kept instances go to the
        new versions, and the load waits only for the removed instances to finish their
        own work and close (as in Triton: ``instance_update.let_go``); the old versions
        finish the rest (requests queued or running on kept instances, sequences in
        progress) in the background."""
        pairs = [(model, old.versions[v]) for v, model in entry.versions.items()]
        removed = [hand_over(model, previous) for model, previous in pairs]
        background = await asyncio.gather(
            *(let_go(m, p, r) for (m, p), r in zip(pairs, removed, strict=True))
        )
        if not all(background):
            await self._retire(old)
            return
        hurry = asyncio.Event()
        task = asyncio.create_task(self._retire_later(old, hurry))
        self._retiring[task] = old.key
        self._hurry[task] = hurry
        task.add_done_callback(self._retiring.pop)
        task.add_done_callback(self._hurry.pop)

    async def _retire_later(self, old: ModelEntry, hurry: asyncio.Event) -> None:
        """Retire versions an update replaced once their sequences in progress ended (they
        go on there: SequenceBatchScheduler.follow), or when ``hurry`` says a later
        retirement of the model (unload, reload, shutdown) does not wait for them."""
        ended = [
            m.scheduler.sequences_ended()
            for m in old.versions.values()
            if isinstance(m.scheduler, SequenceBatchScheduler)
        ]
        if ended:
            waiting: asyncio.Future[object] = asyncio.ensure_future(asyncio.gather(*ended))
            hurried: asyncio.Future[object] = asyncio.ensure_future(hurry.wait())
            await asyncio.wait([waiting, hurried], return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            hurried.cancel()
        await self._retire(old)

    async def _build(
        self,
        directory: ModelDirectory,
        override: mc.ModelConfig | None,
        serving: ModelEntry | None = None,
    ) -> ModelEntry:
        """``serving``: the entry this one replaces, whose instances an instance-group-only
        change updates in place (core/instance_update.py)."""
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
        entry.config = config
        config_file = str(directory.config_path.relative_to(directory.path))
        if serving is not None and instance_only_change(
            serving, config, entry.fingerprint, versions, config_file
        ):
            loop = asyncio.get_running_loop()
            updated = await asyncio.gather(
                *(
                    loop.run_in_executor(
                        self._loaders,
                        update_instances,
                        serving.versions[v],
                        config,
                        directory.version_path(v),
                        self._limiter,
                    )
                    for v in versions
                )
            )
            for model in updated:
                model.namespace = directory.namespace
            entry.versions = {m.version: m for m in updated}
            entry.in_place = True
            return entry
        if config.platform == "ensemble":
            entry.calls = tuple(composing_models(config))
        for number in missing_versions(config.version_policy, directory.versions):
            log.error(  # Triton's text (model_lifecycle.cc); the versions present still load
                "version %d is specified for model '%s', but the version directory is not present",
                number,
                directory.key,
            )
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
            lookup: ConfigLookup = self.lookup_config
            lookup_labels: LabelLookup = self.lookup_labels
            if self._namespacing:
                entry.steps = self._link(directory.namespace, composing_models(config))
                missing = sorted(n for n, ns in entry.steps.items() if ns is None)
                if missing:
                    entry.reason = unlinked_ensemble(directory.key, missing)
                    entry.unlinked = True
                    log.error("failed to load '%s': %s", directory.key, entry.reason)
                    return entry
                config, lookup, lookup_labels = self._linked(config, entry.steps)
            loaded = [
                load_ensemble(
                    config,
                    v,
                    lookup,
                    self._runner,
                    self._limits,
                    model_dir=directory.path,
                    lookup_labels=lookup_labels,
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
        for model in loaded:
            model.namespace = directory.namespace
        entry.versions = {m.version: m for m in loaded}
        return entry

    def _linked(
        self, config: mc.ModelConfig, steps: dict[str, str | None]
    ) -> tuple[mc.ModelConfig, ConfigLookup, LabelLookup]:
        """An ensemble's config with each step's ``model_namespace`` set (Triton sets it
        so that its steps reach that very model), and lookups of those models."""
        linked = mc.ModelConfig()
        linked.CopyFrom(config)
        for step in linked.ensemble_scheduling.step:
            step.model_namespace = steps[step.model_name] or ""

        def version(name: str, number: int) -> ModelVersion | None:
            wanted = "" if number < 0 else str(number)
            return self.find(name, wanted, steps.get(name) or "")

        def lookup(name: str, number: int) -> mc.ModelConfig | None:
            model = version(name, number)
            return model.config if model is not None else None

        def labels(name: str, number: int) -> dict[str, tuple[str, ...]]:
            model = version(name, number)
            return model.labels if model is not None else {}

        return linked, lookup, labels

    async def _retire(self, entry: ModelEntry) -> None:
        """Stop taking requests, let accepted ones finish, free the instances, and remove
        the staged copy the entry was loaded from. Older versions of the model an
        instance-group update left retiring in the background finish first."""
        this = asyncio.current_task()
        older = []
        for task, key in self._retiring.items():  # in the order they began
            if task is this:
                break  # the later ones wait for this one
            if key == entry.key:
                older.append(task)
        if this not in self._retiring:  # an unload, reload or shutdown: no more waiting
            for task in older:  # for their sequences (a background one waits on)
                self._hurry[task].set()
        if older:
            await asyncio.gather(*older)
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
