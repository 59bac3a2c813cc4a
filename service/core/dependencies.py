"""Which models an ensemble calls, and the order that loads callees before callers."""

from __future__ import annotations

from ..repository.config_file import ConfigError, read_config
from ..repository.ensemble_config import composing_models
from ..repository.layout import ModelDirectory

__all__ = ["dependency_waves", "with_composing"]


def _ensemble_calls(directory: ModelDirectory) -> list[str]:
    """The models an ensemble folder's config calls ([] for anything else)."""
    if directory.error:
        return []
    try:
        config = read_config(directory)
    except ConfigError:
        return []
    return composing_models(config) if config.platform == "ensemble" else []


def with_composing(names: list[str], directories: dict[str, ModelDirectory]) -> list[str]:
    """``names`` plus every model their ensembles call, transitively."""
    wanted = list(names)
    for name in wanted:  # grows while iterating: a breadth-first closure
        for called in _ensemble_calls(directories[name]):
            if called in directories and called not in wanted:
                wanted.append(called)
    return wanted


def dependency_waves(directories: dict[str, ModelDirectory]) -> list[list[str]]:
    """Load order: models first, then ensembles once every model they call had its turn."""
    calls = {
        name: {m for m in _ensemble_calls(directory) if m in directories and m != name}
        for name, directory in directories.items()
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
