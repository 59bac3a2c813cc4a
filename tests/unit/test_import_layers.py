"""The service's import graph: no circles, and nothing below the gRPC frontend imports a
transport (docs/architecture.md).

Every import counts, those under ``TYPE_CHECKING`` and inside functions too: a circle
through them is still two modules that cannot be understood, or moved, one without the
other. Only the composition roots (the processes: app, supervisor, engine, frontend) and
``grpc_frontend/`` itself may import grpc, the inference service's messages, or the
frontend; backends, schedulers and the core take plain values (issue 39, item 11).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import service

ROOT = Path(service.__file__).parent
#: Modules that may import a transport: the gRPC frontend and the processes that run it.
TRANSPORT_SIDE = (
    "service.grpc_frontend",
    "service.app",
    "service.supervisor",
    "service.engine",
    "service.frontend",
    "service.__main__",
)
TRANSPORTS = ("grpc", "inference.grpc_service_pb2", "service.grpc_frontend")


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = ["service", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imported(module: str, path: Path) -> Iterator[str]:
    """Every name ``module`` imports, anywhere in the file, made absolute (``from x
    import y`` gives ``x.y``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            # A name in a module, or a module in a package: ``_graph`` keeps the module.
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _graph() -> dict[str, set[str]]:
    """module -> the service modules it imports."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = set()
        for name in _imported(module, path):
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_no_import_circles() -> None:
    assert _circles(_graph()) == []


def test_the_circle_finder_finds_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]


def test_nothing_below_the_frontend_imports_a_transport() -> None:
    offenders = {
        module: sorted(
            name
            for name in _imported(module, path)
            if any(name == t or name.startswith(t + ".") for t in TRANSPORTS)
        )
        for module, path in MODULES.items()
        if not any(module == s or module.startswith(s + ".") for s in TRANSPORT_SIDE)
    }
    assert {m: names for m, names in offenders.items() if names} == {}
