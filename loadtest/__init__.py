"""The server's benchmarks as one tool: ``python -m loadtest <scenario> [options]``.

They start and build the server the way the tests do (``tests/server_process.py``,
``tests/models.py``), so that folder goes on ``sys.path`` here, once. Run from the
repository root.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "loadtest" / "results"
for _folder in (REPO_ROOT / "tests", REPO_ROOT / "tests" / "gateway"):  # gateway_process too
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))
