"""--model-namespacing: one model name in several repositories.

Without it a model is known by its name, and a name in two repositories is an error. With
it, Triton's core (model_repository_manager.cc) knows a model by its *identifier*: the
repository it was found in (its namespace) and its name. The table here is keyed the same
way (``layout.model_key``: ``<repository>::<name>``, Triton's ``ModelIdentifier::str()``),
while every API still names a model by name alone: a name resolves to the one model of
that name, and is refused when several repositories hold one (``ambiguous``). An
ensemble's step finds its model in the ensemble's own repository first, else the one model
of that name anywhere (lifecycle ``_link``); it is linked so when it loads, and rebuilt
when a model of that name comes or goes.

The texts are Triton's (``FindModelIdentifier``, ``ConnectDependencyGraph``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..repository.layout import ModelDirectory

__all__ = [
    "ambiguous",
    "identifier_not_found",
    "keys_named",
    "unknown_name",
    "unlinked_ensemble",
]


def unknown_name(name: str) -> str:
    """A name no repository ever gave a model (Triton: INVALID_ARG)."""
    return f"Request for unknown model: '{name}' is not found"


def identifier_not_found(name: str) -> str:
    """A name whose every model was unloaded or removed (Triton: NOT_FOUND)."""
    return f"Identifier of model '{name}' is not found in global map"


def ambiguous(name: str, count: int) -> str:
    """A name that ``count`` repositories hold a model of (Triton: INVALID_ARG)."""
    return (
        f"There are {count} identifiers of model '{name}' in global map, model namespace "
        "must be provided to resolve ambiguity."
    )


def unlinked_ensemble(key: str, names: list[str]) -> str:
    """An ensemble some of whose steps name no model, or an ambiguous one."""
    return f"ensemble {key} contains models that are not available or ambiguous: " + ", ".join(
        sorted(names)
    )


def keys_named(directories: Mapping[str, ModelDirectory], name: str) -> list[str]:
    """The keys of the model folders called ``name``: one at most without namespacing
    (the key is the name), one per repository holding it with."""
    if name in directories and directories[name].name == name:  # no namespacing
        return [name]
    return [key for key, directory in directories.items() if directory.name == name]
