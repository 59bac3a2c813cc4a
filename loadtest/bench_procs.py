"""The service and gateway processes of the benchmarks: started from this checkout,
ready once their start-up line names the port, CPU read from /proc (children included)."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from pathlib import Path

__all__ = ["Proc", "gateway_proc"]

ROOT = Path(__file__).resolve().parents[1]


class Proc:
    """A subprocess whose stderr is scanned for its start-up line (and kept)."""

    def __init__(self, args: list[str], started: str) -> None:
        self.lines: list[str] = []
        self.port = 0
        self._ready = threading.Event()
        self._pattern = re.compile(started)
        self.proc = subprocess.Popen(
            args,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(60):
            self.stop()
            raise RuntimeError("did not start:\n" + "".join(self.lines))

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            match = self._pattern.search(line)
            if match and not self._ready.is_set():
                self.port = int(match.group(1))
                self._ready.set()

    def cpu_seconds(self) -> float:
        """CPU of the process and its children (a gateway's worker processes)."""
        return _tree_cpu(self.proc.pid)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        code = self.proc.wait(30)
        self._reader.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        return code


def _tree_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        children = {
            int(child)
            for task in Path(f"/proc/{pid}/task").iterdir()
            for child in (task / "children").read_text().split()
        }
    except OSError:  # exited meanwhile
        return 0.0
    return total + sum(_tree_cpu(child) for child in children)


def gateway_proc(python: str, target: str, workers: int = 1, local_socket: str = "") -> Proc:
    """``local_socket``: the service's --grpc-local-socket, as scripts/serve.sh runs them."""
    return Proc(
        [
            *(python, "-m", "gateway", "--grpc-target", target),
            *("--http-address", "127.0.0.1", "--http-port", "0", "--workers", str(workers)),
            *(("--grpc-local-socket", local_socket) if local_socket else ()),
        ],
        r"Started HTTPService at [^\s:]+:(\d+)",
    )
