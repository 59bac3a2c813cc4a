"""Which models an ensemble calls, the order that loads callees before callers, the
composing models an unload with ``unload_dependents`` takes along, and the ensembles an
unload takes out until their steps are back."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from ..repository.config_file import ConfigError, read_config
from ..repository.ensemble_config import composing_models
from ..repository.layout import ModelDirectory

__all__ = ["callers", "dependency_waves", "unused_composing", "with_composing"]


def _ensemble_calls(directory: ModelDirectory) -> list[str]:
    """The models an ensemble folder's config calls ([] for anything else)."""
    if directory.error:
        return []
    try:
        config = read_config(directory)
    except ConfigError:
        return []
    return composing_models(config) if config.platform == "ensemble" else []


def _by_name(directories: dict[str, ModelDirectory]) -> dict[str, list[str]]:
    """Model name -> the keys of its folders (one per repository with --model-namespacing;
    without it the key is the name)."""
    keys: dict[str, list[str]] = {}
    for key, directory in directories.items():
        keys.setdefault(directory.name, []).append(key)
    return keys


def with_composing(keys: list[str], directories: dict[str, ModelDirectory]) -> list[str]:
    """``keys`` plus every model their ensembles call, transitively (a called name: the
    model of that name in each repository that holds one)."""
    by_name = _by_name(directories)
    wanted = list(keys)
    for key in wanted:  # grows while iterating: a breadth-first closure
        for called in _ensemble_calls(directories[key]):
            for callee in by_name.get(called, ()):
                if callee not in wanted:
                    wanted.append(callee)
    return wanted


def dependency_waves(directories: dict[str, ModelDirectory]) -> list[list[str]]:
    """Load order: models first, then ensembles once every model they call had its turn."""
    by_name = _by_name(directories)
    calls = {
        key: {c for m in _ensemble_calls(directory) for c in by_name.get(m, ()) if c != key}
        for key, directory in directories.items()
    }
    waves: list[list[str]] = []
    done: set[str] = set()
    while len(done) < len(calls):
        wave = [n for n, needs in calls.items() if n not in done and needs <= done]
        if not wave:  # a cycle: load the rest together, validation reports it
            wave = [n for n in calls if n not in done]
        waves.append(wave)
        done.update(wave)
    return waves


def unused_composing(
    removed: Iterable[str],
    calls: Mapping[str, Collection[str]],
    explicit: Collection[str],
) -> list[str]:
    """The models to unload after ``removed`` when the unload asks for its dependents:
    Triton's cascading removal (DependencyGraph::RemoveNodes). A model that a removed
    ensemble called goes too when nothing left calls it and it was not loaded explicitly
    (it came in as a composing model), and so on down nested ensembles.

    ``calls``: each model in the table before the unload, ``removed`` included -> the
    keys of the models it calls (only ensembles call any); ``explicit``: the keys loaded
    by name rather than as composing models. Keys in the order they are to be unloaded.
    """
    gone = set(removed)
    pending = list(gone)
    out: list[str] = []
    while pending:
        for callee in sorted(calls.get(pending.pop(0), ())):
            if callee in gone or callee not in calls or callee in explicit:
                continue
            if any(callee in called for key, called in calls.items() if key not in gone):
                continue
            gone.add(callee)
            out.append(callee)
            pending.append(callee)
    return out


def callers(removed: Iterable[str], calls: Mapping[str, Collection[str]]) -> list[str]:
    """The ensembles that lose a step when ``removed`` go: those calling a removed model,
    and those calling such an ensemble, and so on up nested ensembles. Triton's
    dependency graph finds each of them invalid (a composing model is missing) and
    unloads it, with or without ``unload_dependents`` (DependencyGraph::RemoveNode marks
    a removed node's downstreams affected).

    ``calls``: each model in the table -> the keys it calls. Outermost first, the order
    to unload them in, so no ensemble outlives a step it still calls.
    """
    gone = set(removed)
    found: list[str] = []
    frontier = set(gone)
    while frontier:
        layer = sorted(
            key
            for key, called in calls.items()
            if key not in gone and frontier.intersection(called)
        )
        gone.update(layer)
        found.extend(layer)
        frontier = set(layer)
    return found[::-1]
