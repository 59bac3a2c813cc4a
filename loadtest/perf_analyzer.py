"""perf_analyzer (Triton's C++ load generator) as a c=1 latency probe.

The Python load generator's own per-request cost is in its latency figure; perf_analyzer's
is small, so the c=1 p50 it reports is the server's. The binary comes from Triton's SDK
(loadtest/README.md, "perf_analyzer on these machines"); it needs libcudart, found in the
``nvidia/*/lib`` folders of the environment it was installed into, or beside the binary
(a bundle carried to a machine without that environment).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path


def perf_analyzer_p50(
    exe: Path, model: str, url: str, protocol: str = "grpc", seconds: float = 3.0
) -> float:
    """``model``'s p50 in ms at concurrency 1 over ``protocol`` (grpc or http), inputs zero
    (an INT64 id input stays inside any vocabulary). ``-s 1000``: no shared machine is
    "stable" by perf_analyzer's 10 %."""
    libs = [str(p) for p in exe.parent.parent.glob("lib/python*/site-packages/nvidia/*/lib")]
    libs += [str(exe.parent), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]
    command = [
        *(str(exe), "-m", model, "-i", protocol, "-u", url, "-s", "1000"),
        *("--concurrency-range", "1", "--percentile=50", "-r", "3", "--input-data", "zero"),
        *("--measurement-interval", str(round(seconds * 1e3))),
    ]  # fmt: skip
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(libs)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    found = re.search(r"Concurrency: 1, .* latency (\d+) usec", done.stdout)
    if found is None:
        raise RuntimeError(f"perf_analyzer failed ({done.returncode}): {done.stdout}{done.stderr}")
    return int(found.group(1)) / 1e3
