"""Model files sent with a load request, written into a directory the server owns.

Every name is checked before anything is written: ``<version>/<relative path>`` with a
numeric version, no absolute paths, no ``..``, no empty or hidden-trick components, no
component longer than the file system allows, and the resolved target must stay inside
the staging directory. Nothing is written unless every name passes, and a write that
fails (disk full, a name the file system refuses) removes what was written.

Two kinds of refusal, as Triton answers them. What Triton's own localize step refuses, so
that its repository poll fails (INTERNAL "failed to poll from model repository"), is a
``StagingFailure``: a name part longer than the file system's limit (ENAMETOOLONG; Triton
2.51 aborts on it, later releases fail the poll), a name whose ``..`` leads out of the
model directory, a name that is both a file and another name's folder, and any write the
file system refuses. What only this server refuses (names Triton would write: absolute,
``.``/``..``/empty parts inside the model directory, no numeric version folder) is a
``StagingError``, a ValueError: INVALID_ARGUMENT naming the file.

Each staged copy lives in its own folder until ``release``: the lifecycle manager calls
it when the model version that uses the copy is unloaded or replaced, or at once when
its load fails; ``cleanup`` removes whatever is left at shutdown.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

__all__ = ["StagingArea", "StagingError", "StagingFailure"]


class StagingError(ValueError):
    """A file name this server refuses by its own rules (INVALID_ARGUMENT)."""


class StagingFailure(Exception):
    """The files cannot be put in place where Triton's localize step fails too: a name
    the file system refuses, one leading out of the model directory, a write that fails."""


#: The longest file name component Linux file systems accept (NAME_MAX), in bytes.
NAME_MAX = 255


def _leaves_the_folder(parts: list[str]) -> bool:
    """Whether the ``..`` parts climb above the folder the name is relative to (the name
    normalized as Triton's weakly_canonical does: nothing on disk is consulted)."""
    depth = 0
    for part in parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def _checked(name: str) -> PurePosixPath:
    if "\\" in name or "\x00" in name:
        raise StagingError(f"invalid file name '{name}'")
    parts = name.split("/")  # not PurePosixPath: it would silently drop '.' and '' parts
    if any(len(part.encode("utf-8", "surrogatepass")) > NAME_MAX for part in parts):
        raise StagingFailure(
            f"file name '{name}' has a part longer than {NAME_MAX} bytes, the file system's limit"
        )
    if _leaves_the_folder(parts):
        raise StagingFailure(f"file name '{name}' must stay within the model directory")
    if name.startswith("/"):
        raise StagingError(f"file name '{name}' must be relative: '<version>/<file>'")
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
                raise StagingFailure(f"file name '{parent}' is also a folder of '{path}'")


class StagingArea:
    """A private temporary directory; each staged model gets a fresh subdirectory."""

    def __init__(self) -> None:
        self._root: Path | None = None
        self._counter = itertools.count()

    def stage(self, model_name: str, files: Mapping[str, bytes]) -> Path:
        """Write ``files`` under a new model directory and return it (blocking)."""
        if model_name in ("", ".", "..") or any(c in model_name for c in "/\\\x00"):
            raise StagingError(f"invalid model name '{model_name}' for staged files")
        if len(model_name.encode("utf-8", "surrogatepass")) > NAME_MAX:
            raise StagingError(
                f"model name is longer than {NAME_MAX} bytes, the file system's limit"
            )
        paths = {_checked(name): data for name, data in files.items()}
        _check_no_conflicts(list(paths))
        try:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="model-staging-"))
            copy = self._root / f"{next(self._counter)}"
            copy.mkdir()
        except OSError as exc:
            raise StagingFailure(f"unable to create a staging folder: {exc.strerror}") from None
        model_dir = copy / model_name
        try:
            _write(model_dir, paths)
        except BaseException:
            shutil.rmtree(copy, ignore_errors=True)
            raise
        return model_dir

    def release(self, model_dir: Path) -> None:
        """Remove the staged copy ``stage`` returned as ``model_dir`` (blocking); a copy
        already removed, or a folder this area did not stage, is left alone."""
        root = self._root
        copy = model_dir.parent
        if root is not None and copy.parent == root:
            shutil.rmtree(copy, ignore_errors=True)

    def copies(self) -> list[Path]:
        """The staged copies that exist now (one folder each)."""
        if self._root is None or not self._root.is_dir():
            return []
        return sorted(self._root.iterdir())

    def cleanup(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


def _write(model_dir: Path, paths: Mapping[PurePosixPath, bytes]) -> None:
    try:
        model_dir.mkdir()
    except OSError as exc:
        raise StagingFailure(f"unable to create the model folder: {exc.strerror}") from None
    base = model_dir.resolve()
    for rel, data in paths.items():
        target = (model_dir / rel).resolve()
        if not target.is_relative_to(base):
            raise StagingFailure(f"file name '{rel}' must stay within the model directory")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as out:  # never follows or replaces an existing entry
                out.write(data)
        except OSError as exc:
            raise StagingFailure(f"unable to write file '{rel}': {exc.strerror}") from None
