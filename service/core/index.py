"""Repository index entries: what the RepositoryIndex RPC reports for one model name."""

from __future__ import annotations

from dataclasses import dataclass

from .model import ModelEntry, ModelState

__all__ = ["IndexEntry", "index_entries"]


@dataclass(frozen=True)
class IndexEntry:
    name: str
    version: str
    state: str
    reason: str


def index_entries(
    name: str, entry: ModelEntry | None, loading: bool, unloaded: tuple[int, ...] | None
) -> list[IndexEntry]:
    """One entry per version of a loaded model, or of an unloaded one (``unloaded``: the
    versions it had, as Triton keeps them); one version-less entry otherwise, with no
    state for a model never loaded (Triton's ``name_only`` entry)."""
    if entry is None or entry.unlinked:  # an unlinked ensemble: no version ever loaded
        if loading:
            return [IndexEntry(name, "", ModelState.LOADING.value, "")]
        if unloaded is not None:
            gone = ModelState.UNAVAILABLE.value
            return [IndexEntry(name, str(v), gone, "unloaded") for v in unloaded] or [
                IndexEntry(name, "", gone, "unloaded")
            ]
        return [IndexEntry(name, "", "", "")]  # never loaded: Triton lists its name only
    if entry.versionless:  # Triton's index lists no state of a model without versions
        return []
    if entry.reason:
        return [IndexEntry(name, "", ModelState.UNAVAILABLE.value, entry.reason)]
    return [
        IndexEntry(name, str(v), m.state.value, m.reason) for v, m in sorted(entry.versions.items())
    ]
