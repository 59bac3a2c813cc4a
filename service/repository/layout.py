"""Finding models in Triton-layout repositories.

Layout: ``<repo>/<model>/config.pbtxt`` plus numbered version folders ``<repo>/<model>/<N>/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ModelDirectory", "discover_models", "fingerprint", "model_directory", "model_key"]

CONFIG_FILE = "config.pbtxt"

# --model-config-name: a model whose ``configs/<name>.pbtxt`` exists is read from it
# (Triton's custom configuration); set once by the engine before any load.
_custom_config = ""


def set_config_name(name: str) -> None:
    global _custom_config
    _custom_config = name


def model_key(namespace: str, name: str) -> str:
    """How the model table keys a model: its name, or with --model-namespacing, Triton's
    ``ModelIdentifier::str()`` of it, ``<repository>::<name>`` (the namespace of a model is
    the repository it was found in; a model loaded from sent files has none)."""
    return f"{namespace}::{name}" if namespace else name


@dataclass(frozen=True)
class ModelDirectory:
    """One model's folder, or why it cannot be used (``error`` set). ``namespace``: its
    repository, with --model-namespacing ('' without)."""

    name: str
    path: Path
    repository: Path
    versions: tuple[int, ...] = ()
    error: str = ""
    duplicates: tuple[Path, ...] = field(default=())
    namespace: str = ""

    @property
    def key(self) -> str:
        return model_key(self.namespace, self.name)

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


def model_directory(name: str, path: Path, repository: Path, namespace: str = "") -> ModelDirectory:
    return ModelDirectory(name, path, repository, _numeric_versions(path), namespace=namespace)


def fingerprint(path: Path) -> tuple[tuple[str, int, int], ...]:
    """Every file under a model folder with its size and mtime: a change means reload."""
    entries = []
    for file in sorted(path.rglob("*")):
        if file.is_file():
            stat = file.stat()
            entries.append((str(file.relative_to(path)), stat.st_size, stat.st_mtime_ns))
    return tuple(entries)


def discover_models(
    repositories: Sequence[Path], namespacing: bool = False
) -> dict[str, ModelDirectory]:
    """Every model folder of every repository, keyed by ``model_key``: by model name, or
    with ``namespacing`` (--model-namespacing) by repository and name.

    A key found twice (a name in two repositories, or with namespacing a repository named
    twice) is unusable (Triton refuses it too): the entry carries an error instead of
    silently picking one.
    """
    found: dict[str, ModelDirectory] = {}
    for repo in repositories:
        namespace = str(repo) if namespacing else ""
        for child in sorted(repo.iterdir()):
            if not child.is_dir() or child.name.startswith("."):
                continue
            entry = model_directory(child.name, child, repo, namespace)
            previous = found.get(entry.key)
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
                    namespace=namespace,
                )
            found[entry.key] = entry
    return found
