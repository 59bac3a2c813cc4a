"""Built-in utility backends (``identity``, ``repeat``, ``square``): in-process request
backends that Triton users and Triton's own tests rely on, reimplemented here."""

from __future__ import annotations

from ..base import Backend

__all__ = ["builtin_backend"]


def builtin_backend(name: str) -> Backend:
    """A fresh backend object (one per model load, as the loader asks)."""
    if name == "identity":
        from .identity import IdentityBackend

        return IdentityBackend()
    if name == "repeat":
        from .repeat import RepeatBackend

        return RepeatBackend()
    if name == "square":
        from .square import SquareBackend

        return SquareBackend()
    raise ValueError(f"unknown built-in backend '{name}'")
