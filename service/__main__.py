"""``python -m service``: parse flags, configure logging, run until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import sys

from .app import serve
from .config import parse_args


def main() -> int:
    config = parse_args()
    logging.basicConfig(
        level=logging.DEBUG if config.log_verbose > 0 else logging.INFO,
        format="%(asctime)s %(levelname).1s %(name)s] %(message)s",
        stream=sys.stderr,
    )
    return asyncio.run(serve(config))


if __name__ == "__main__":
    sys.exit(main())
