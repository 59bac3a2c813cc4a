"""What a scenario is: a named subcommand with its options and its run.

``__main__`` builds one subparser per registered class; the first line of the class
docstring is its line in the list, and the module docstring its ``--help`` text (the class
docstring where it has more lines, for two scenarios in one module). Options and
run are static so that a test can parse a scenario's options without running it
(``parse``).
"""

from __future__ import annotations

import argparse
import inspect
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar


class Scenario(ABC):
    """Base of every scenario; ``name`` is its subcommand."""

    name: ClassVar[str]

    @staticmethod
    @abstractmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        """Add this scenario's options to its subparser."""

    @staticmethod
    @abstractmethod
    def run(args: argparse.Namespace) -> int:
        """Run with the parsed options; the process's exit code."""


SCENARIOS: dict[str, type[Scenario]] = {}
S = TypeVar("S", bound=type[Scenario])


def register(cls: S) -> S:
    """Class decorator: make ``cls`` a subcommand of ``python -m loadtest``."""
    if cls.name in SCENARIOS:
        raise ValueError(f"two scenarios named {cls.name!r}")
    SCENARIOS[cls.name] = cls
    return cls


def window_args(
    p: argparse.ArgumentParser,
    duration: float | None,
    warmup: float | None = None,
    *,
    rounds: int | None = None,
    concurrency: int | list[int] | None = None,
    processes: int | None = None,
    quick: str = "",
    quick_values: Mapping[str, Any] | None = None,
) -> None:
    """The options most scenarios share: the measured window, its warm-up, rounds (which
    alternate what they compare), closed-loop concurrency (a list: one row each), client
    processes, and ``--quick`` (``quick`` its help, ``quick_values`` the options it sets:
    a value or a function of the parsed options)."""
    p.add_argument("--duration", type=float, default=duration, help="measured seconds a window")
    if warmup is not None or duration is None:
        p.add_argument("--warmup", type=float, default=warmup, help="warm-up seconds a window")
    if rounds is not None:
        p.add_argument("--rounds", type=int, default=rounds, help="alternating rounds; medians")
    if isinstance(concurrency, list):
        p.add_argument("--concurrency", type=int, nargs="+", default=concurrency)
    elif concurrency is not None:
        p.add_argument("--concurrency", type=int, default=concurrency)
    if processes is not None:
        p.add_argument("--processes", type=int, default=processes, help="client processes")
    if quick:
        p.add_argument("--quick", action="store_true", help=quick)
        p.set_defaults(quick_values=quick_values or {})


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], cls: type[Scenario]
) -> None:
    doc = (inspect.getdoc(cls) or cls.name).splitlines()
    parser = subparsers.add_parser(
        cls.name,
        help=doc[0],
        description="\n".join(doc) if len(doc) > 1 else sys.modules[cls.__module__].__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cls.add_cli_args(parser)
    parser.set_defaults(scenario=cls)


def finish(args: argparse.Namespace, command: str) -> argparse.Namespace:
    """``command`` (what a report names to reproduce it), and ``--quick``'s values."""
    args.command = command
    if getattr(args, "quick", False):
        for key, value in args.quick_values.items():
            setattr(args, key, value(args) if callable(value) else value)
    return args


def parse(cls: type[Scenario], argv: Sequence[str]) -> argparse.Namespace:
    """The options of one scenario, as ``python -m loadtest NAME *argv`` would parse them."""
    parser = argparse.ArgumentParser(prog=f"python -m loadtest {cls.name}")
    cls.add_cli_args(parser)
    return finish(parser.parse_args(list(argv)), "")
