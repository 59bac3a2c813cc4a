"""``python -m loadtest <scenario> [options]``: one subcommand per registered scenario."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from loadtest import scenarios  # noqa: F401  (registers every scenario)
from loadtest.report import command
from loadtest.scenario import SCENARIOS, add_parser, finish


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest",
        description="The server's benchmarks (loadtest/README.md). Run from the repository root.",
    )
    sub = parser.add_subparsers(title="scenarios", metavar="SCENARIO", required=True)
    for name in sorted(SCENARIOS):
        add_parser(sub, SCENARIOS[name])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    code: int = args.scenario.run(finish(args, command(argv)))
    return code


if __name__ == "__main__":
    sys.exit(main())
