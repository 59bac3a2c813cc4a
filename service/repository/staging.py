"""Model files sent with a load request, written into a directory the server owns.

Every name is checked before anything is written: ``<version>/<relative path>`` with a
numeric version, no absolute paths, no ``..``, no empty or hidden-trick components, and
the resolved target must stay inside the staging directory. Nothing is written unless
every name passes.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

__all__ = ["StagingArea", "StagingError"]


class StagingError(ValueError):
    """A file name that would escape the staging directory, or is otherwise unusable."""


def _checked(name: str) -> PurePosixPath:
    if "\\" in name or "\x00" in name:
        raise StagingError(f"invalid file name '{name}'")
    if name.startswith("/"):
        raise StagingError(f"file name '{name}' must be relative: '<version>/<file>'")
    parts = name.split("/")  # not PurePosixPath: it would silently drop '.' and '' parts
    if any(part in ("", ".", "..") for part in parts):
        raise StagingError(f"file name '{name}' must not contain '.', '..' or empty parts")
    if not (parts[0].isascii() and parts[0].isdigit()) or len(parts) < 2:
        raise StagingError(f"file name '{name}' must start with a numeric version folder")
    return PurePosixPath(name)


def _check_no_conflicts(paths: list[PurePosixPath]) -> None:
    """A name that is also another name's folder cannot be both a file and a directory."""
    names = {str(p) for p in paths}
    for path in paths:
        for parent in path.parents:
            if str(parent) in names:
                raise StagingError(f"file name '{parent}' is also a folder of '{path}'")


class StagingArea:
    """A private temporary directory; each staged model gets a fresh subdirectory."""

    def __init__(self) -> None:
        self._root: Path | None = None
        self._counter = itertools.count()

    def stage(self, model_name: str, files: Mapping[str, bytes]) -> Path:
        """Write ``files`` under a new model directory and return it (blocking)."""
        if model_name in ("", ".", "..") or any(c in model_name for c in "/\\\x00"):
            raise StagingError(f"invalid model name '{model_name}' for staged files")
        paths = {_checked(name): data for name, data in files.items()}
        _check_no_conflicts(list(paths))
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="model-staging-"))
        model_dir = self._root / f"{next(self._counter)}" / model_name
        model_dir.mkdir(parents=True)
        base = model_dir.resolve()
        for rel, data in paths.items():
            target = (model_dir / rel).resolve()
            if not target.is_relative_to(base):
                raise StagingError(f"file name '{rel}' escapes the model directory")
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as out:  # never follows or replaces an existing entry
                out.write(data)
        return model_dir

    def cleanup(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
