"""Finding models in Triton-layout repositories.

Layout: ``<repo>/<model>/config.pbtxt`` plus numbered version folders ``<repo>/<model>/<N>/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ModelDirectory", "discover_models", "fingerprint", "model_directory"]

CONFIG_FILE = "config.pbtxt"

# --model-config-name: a model whose ``configs/<name>.pbtxt`` exists is read from it
# (Triton's custom configuration); set once by the engine before any load.
_custom_config = ""


def set_config_name(name: str) -> None:
    global _custom_config
    _custom_config = name


@dataclass(frozen=True)
class ModelDirectory:
    """One model's folder, or why it cannot be used (``error`` set)."""

    name: str
    path: Path
    repository: Path
    versions: tuple[int, ...] = ()
    error: str = ""
    duplicates: tuple[Path, ...] = field(default=())

    @property
    def config_path(self) -> Path:
        if _custom_config:
            custom = self.path / "configs" / f"{_custom_config}.pbtxt"
            if custom.is_file():
                return custom
        return self.path / CONFIG_FILE

    def version_path(self, version: int) -> Path:
        return self.path / str(version)


def _numeric_versions(model_path: Path) -> tuple[int, ...]:
    versions = []
    for child in model_path.iterdir():
        if child.is_dir() and child.name.isascii() and child.name.isdigit():
            versions.append(int(child.name))
    return tuple(sorted(versions))


def model_directory(name: str, path: Path, repository: Path) -> ModelDirectory:
    return ModelDirectory(name, path, repository, _numeric_versions(path))


def fingerprint(path: Path) -> tuple[tuple[str, int, int], ...]:
    """Every file under a model folder with its size and mtime: a change means reload."""
    entries = []
    for file in sorted(path.rglob("*")):
        if file.is_file():
            stat = file.stat()
            entries.append((str(file.relative_to(path)), stat.st_size, stat.st_mtime_ns))
    return tuple(entries)


def discover_models(repositories: Sequence[Path]) -> dict[str, ModelDirectory]:
    """Every model folder of every repository, keyed by model name.

    A name found in two repositories is unusable (Triton refuses it too): the entry
    carries an error instead of silently picking one.
    """
    found: dict[str, ModelDirectory] = {}
    for repo in repositories:
        for child in sorted(repo.iterdir()):
            if not child.is_dir() or child.name.startswith("."):
                continue
            entry = model_directory(child.name, child, repo)
            previous = found.get(child.name)
            if previous is not None:
                entry = ModelDirectory(
                    child.name,
                    child,
                    repo,
                    error=(
                        f"model '{child.name}' appears in more than one repository: "
                        f"{previous.repository} and {repo}"
                    ),
                    duplicates=(previous.path, child),
                )
            found[child.name] = entry
    return found
