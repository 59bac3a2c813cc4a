"""NumPy 1 names for Python models: the aliases NumPy 2 removed, put back on ``numpy``
before the worker imports a model's ``model.py`` (docs/decisions/051).

Triton 2.51's python models run on NumPy 1 (its containers ship 1.26), so models written
for it use ``np.NINF``, ``np.float_``, ``np.round_``...; NumPy 2, this server's, raises
``AttributeError: `np.NINF` was removed in the NumPy 2.0 release. Use `-np.inf` instead.``
for them and has no switch to re-enable them. Only names whose NumPy 1 meaning NumPy 2
still has exactly (a constant, a type, or a function renamed or moved) come back; NumPy 1
functions NumPy 2 dropped outright (``np.find_common_type``, ``np.set_string_function``,
...) keep NumPy's own error naming their replacement, and NumPy 2's changed semantics
(NEP 50 promotion, ``copy=False``) stay. A model that needs all of NumPy 1 runs in a NumPy 1
environment of its own (``EXECUTION_ENV_PATH``). Under NumPy 1 nothing is missing, so
nothing is set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["numpy1_names", "restore_numpy1_names"]


def _asfarray(a: Any, dtype: Any = np.float64) -> Any:
    """NumPy 1's ``asfarray``: an array of an inexact type (float64 unless given one)."""
    if not np.issubdtype(dtype, np.inexact):
        dtype = np.float64
    return np.asarray(a, dtype=dtype)


def _issubclass_(arg1: Any, arg2: Any) -> bool:
    """NumPy 1's ``issubclass_``: ``issubclass`` that answers False instead of raising."""
    try:
        return issubclass(arg1, arg2)
    except TypeError:
        return False


def _in1d(ar1: Any, ar2: Any, assume_unique: bool = False, invert: bool = False, **kw: Any) -> Any:
    """NumPy 1's ``in1d``: ``isin`` on the flattened first argument."""
    return np.isin(np.ravel(ar1), ar2, assume_unique=assume_unique, invert=invert, **kw)


def _msort(a: Any) -> Any:
    """NumPy 1's ``msort``: a copy sorted along the first axis."""
    return np.sort(a, axis=0)


def _sctype2char(sctype: Any) -> str:
    """NumPy 1's ``sctype2char``: the type's character code."""
    return str(np.dtype(sctype).char)


def _fast_copy_and_transpose(a: Any) -> Any:
    """NumPy 1's ``fastCopyAndTranspose``: the transpose, as a new array."""
    return np.asarray(a).T.copy()


class _Cast(dict[type, Callable[[Any], Any]]):
    """NumPy 1's ``np.cast[type](x)``: ``x`` as an array of that type."""

    def __missing__(self, key: Any) -> Callable[[Any], Any]:
        kind = np.dtype(key).type
        caster: Callable[[Any], Any] = lambda x: np.asarray(x).astype(kind)  # noqa: E731
        self[key] = caster
        return caster


def numpy1_names() -> dict[str, Any]:
    """Name -> its NumPy 1 value, each a NumPy 2 value of the same meaning (NumPy 2 only:
    some of the values, ``np.trapezoid`` say, are NumPy 2's names)."""
    return {
        # constants
        "Inf": np.inf,
        "Infinity": np.inf,
        "infty": np.inf,
        "PINF": np.inf,
        "NINF": -np.inf,
        "NaN": np.nan,
        "NAN": np.nan,
        "PZERO": 0.0,
        "NZERO": -0.0,
        "CLIP": 0,
        "WRAP": 1,
        "RAISE": 2,
        "MAXDIMS": 32,
        "BUFSIZE": 8192,
        "UFUNC_BUFSIZE_DEFAULT": 8192,
        # scalar types
        "float_": np.float64,
        "complex_": np.complex128,
        "cfloat": np.complex128,
        "singlecomplex": np.complex64,
        "longfloat": np.longdouble,
        "clongfloat": np.clongdouble,
        "longcomplex": np.clongdouble,
        "string_": np.bytes_,
        "unicode_": np.str_,
        # renamed or moved functions and classes
        "round_": np.round,
        "alltrue": np.all,
        "sometrue": np.any,
        "product": np.prod,
        "cumproduct": np.cumprod,
        "trapz": np.trapezoid,
        "mat": np.asmatrix,
        "asfarray": _asfarray,
        "issubclass_": _issubclass_,
        "in1d": _in1d,
        "msort": _msort,
        "sctype2char": _sctype2char,
        "fastCopyAndTranspose": _fast_copy_and_transpose,
        "cast": _Cast(),
        "RankWarning": np.exceptions.RankWarning,
        "DataSource": np.lib.npyio.DataSource,
        "compare_chararrays": np.char.compare_chararrays,
        "format_parser": np.rec.format_parser,
        "byte_bounds": np.lib.array_utils.byte_bounds,
        "add_docstring": np.lib.add_docstring,
        "add_newdoc": np.lib.add_newdoc,
    }


def restore_numpy1_names() -> list[str]:
    """Set on ``numpy`` each NumPy 1 name that it lacks; the names set (none on NumPy 1)."""
    if int(np.__version__.split(".")[0]) < 2:
        return []
    restored = []
    for name, value in numpy1_names().items():
        if name not in np.__dict__:
            setattr(np, name, value)
            restored.append(name)
    return restored
