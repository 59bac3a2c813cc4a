"""What a scenario is: a named subcommand with its options and its run.

``__main__`` builds one subparser per registered class; a scenario's module docstring is
its ``--help`` text and the first line of its class docstring its line in the list. Options
and run are static so that a scenario carries no state between the two, and a test can
parse a scenario's options without running it (``parse``).
"""

from __future__ import annotations

import argparse
import inspect
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, TypeVar

__all__ = ["SCENARIOS", "Scenario", "add_parser", "parse", "register"]


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


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], cls: type[Scenario]
) -> None:
    summary = (inspect.getdoc(cls) or cls.name).splitlines()[0]
    parser = subparsers.add_parser(
        cls.name,
        help=summary,
        description=sys.modules[cls.__module__].__doc__ or summary,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cls.add_cli_args(parser)
    parser.set_defaults(scenario=cls)


def parse(cls: type[Scenario], argv: Sequence[str]) -> argparse.Namespace:
    """The options of one scenario, as ``python -m loadtest NAME *argv`` would parse them."""
    parser = argparse.ArgumentParser(prog=f"python -m loadtest {cls.name}")
    cls.add_cli_args(parser)
    args = parser.parse_args(list(argv))
    args.command = ""
    return args
