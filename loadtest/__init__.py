"""The server's benchmarks as one tool: ``python -m loadtest <scenario> [options]``.

Each scenario is a module of ``loadtest.scenarios``; what several of them use lives beside
this file: process and process-tree CPU (``metrics``), the h2load driver (``h2grpc``), the
closed-loop gRPC load generator (``loadgen``), the in-process ceiling (``ceiling``), the
model repository (``repository``), the processes under test (``processes``) and the report
writer (``report``). The benchmarks start and build the server the way the tests do, with
``tests/server_process.py`` and ``tests/models.py``, so that folder goes on ``sys.path``
here, once, for every module of the package. Run from the repository root.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "loadtest" / "results"
if str(REPO_ROOT / "tests") not in sys.path:
    sys.path.append(str(REPO_ROOT / "tests"))
