"""Replicas of the server behind nginx on loopback, for the tests.

Standard library only, like server_process.py, so both environments use it. A replica is
one service process and, unless asked otherwise, its REST gateway; the balancer is the
system's nginx (Debian's package) run in the foreground with the shipped configuration
(deploy/nginx/nginx.conf.template through deploy/nginx/render.py), its pid, logs and
temporary files in one directory of its own.
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Self

from server_process import REPO_ROOT, LoggedProcess, ServerProcess

sys.path.insert(0, str(Path(__file__).parent / "gateway"))
from gateway_process import GatewayProcess

__all__ = [
    "CLIENT_ADDRESS",
    "AccessRecord",
    "Balancer",
    "Cluster",
    "Replica",
    "find_nginx",
    "nginx_missing",
]

SEQUENCE_HEADER = "triton-sequence-id"
#: Client affinity on the client's address (``Balancer(client_affinity=...)``).
CLIENT_ADDRESS = "$remote_addr"
#: What a replica behind nginx runs with (deploy/k8s/deployment.yaml does the same).
LAME_DUCK_ARGS = ("--lame-duck-secs", "1")


def find_nginx() -> str | None:
    """The nginx binary: on PATH, or where Debian puts it (/usr/sbin is not on every PATH)."""
    found = shutil.which("nginx")
    if found is None and os.access("/usr/sbin/nginx", os.X_OK):
        found = "/usr/sbin/nginx"
    return found


def nginx_missing() -> str | None:
    """Why the replica tests cannot run here, or None."""
    if find_nginx() is None:
        return (
            "nginx is not installed: scripts/bootstrap.sh test installs Debian's package "
            "when it runs as root; otherwise `apt-get install nginx`"
        )
    return None


def _render_module() -> ModuleType:
    path = REPO_ROOT / "deploy" / "nginx" / "render.py"
    spec = importlib.util.spec_from_file_location("nginx_render", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    """A port below the ephemeral range that binds now (nginx needs explicit ports)."""
    for _ in range(200):
        port = random.randint(20000, 32000)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port found between 20000 and 32000")


class Replica:
    """One service (and its gateway); restartable on the same ports."""

    def __init__(
        self,
        repositories: Sequence[Path],
        service_args: Sequence[str] = (),
        *,
        gateway: bool = True,
        gateway_args: Sequence[str] = (),
    ) -> None:
        self._repositories = list(repositories)
        self._service_args = list(service_args)
        self._gateway_args = list(gateway_args)
        self._with_gateway = gateway
        self.service: ServerProcess | None = None
        self.gateway: GatewayProcess | None = None
        self.grpc_port = 0
        self.http_port = 0

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def start(self) -> Self:
        ports = ["--grpc-port", str(self.grpc_port)] if self.grpc_port else []
        # Behind nginx's kept connections (each for at most 300 ms): a lame-duck second.
        args = [*LAME_DUCK_ARGS, *self._service_args, *ports]
        self.service = ServerProcess(self._repositories, args).start()
        self.grpc_port = self.service.port
        if self._with_gateway:
            ports = ["--http-port", str(self.http_port)] if self.http_port else []
            self.gateway = GatewayProcess(self.grpc_url, [*self._gateway_args, *ports]).start()
            self.http_port = self.gateway.port
        return self

    def processes(self) -> list[LoggedProcess]:
        return [p for p in (self.gateway, self.service) if p is not None]

    def send_signal(self, sig: int) -> None:
        for process in self.processes():
            process.send_signal(sig)

    def wait(self, timeout: float) -> list[int]:
        """Exit codes (gateway first), once both have exited by themselves."""
        return [process.wait(timeout) for process in self.processes()]

    def kill(self) -> None:
        for process in self.processes():
            process.kill()

    def stop(self) -> list[int]:
        return [process.stop() for process in self.processes()]


@dataclass(frozen=True)
class AccessRecord:
    """One line of the balancer's access log (log_format ``triton``)."""

    client: str  # $remote_addr
    request: str
    status: int
    sequence: str  # "-" when the request carried no triton-sequence-id
    upstreams: tuple[str, ...]  # every replica tried, in order
    upstream_statuses: tuple[str, ...]
    grpc_status: str  # trailers-only / trailer, e.g. "-/0"


_ACCESS = re.compile(
    r'^(?P<client>\S+) \[[^]]*\] "(?P<request>[^"]*)" (?P<status>\d+) '
    r"seq=(?P<seq>\S+) upstream=(?P<up>.*?) "
    r"upstream_status=(?P<ust>.*?) grpc_status=(?P<grpc>\S+) time="
)


class Balancer:
    """nginx on two free loopback ports (gRPC, REST) in front of the given replicas;
    ``client_affinity`` (an nginx variable, e.g. "$remote_addr") renders the
    client-affinity mode (render.py --client-affinity)."""

    def __init__(
        self,
        grpc_servers: Sequence[str],
        http_servers: Sequence[str],
        *,
        fail_timeout: str = "1s",
        worker_processes: str = "1",
        client_affinity: str = "",
    ) -> None:
        binary = find_nginx()
        if binary is None:
            raise RuntimeError(nginx_missing())
        self._binary = binary
        self._grpc_servers = list(grpc_servers)
        self._http_servers = list(http_servers)
        self._fail_timeout = fail_timeout
        self._workers = worker_processes
        self._affinity = client_affinity
        # Its own directory, readable by nginx's workers (user nobody when run as root).
        self.dir = Path(tempfile.mkdtemp(prefix="triton-nginx-"))
        self.dir.chmod(0o755)
        self.grpc_port = 0
        self.http_port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def pid(self) -> int:
        """The master process (its workers are its children)."""
        assert self._proc is not None
        return self._proc.pid

    def reload(self, settle_s: float = 1.0) -> None:
        """Re-read nginx.conf (SIGHUP): new workers start, the old ones finish and leave."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGHUP)
        time.sleep(settle_s)

    def start(self, timeout: float = 15.0) -> Self:
        render = _render_module()
        for _ in range(5):
            self.grpc_port, self.http_port = _free_port(), _free_port()
            for sub in ("logs", "temp"):
                (self.dir / sub).mkdir(exist_ok=True)
            (self.dir / "nginx.conf").write_text(
                render.render(
                    self._grpc_servers,
                    self._http_servers,
                    grpc_listen=self.grpc_url,
                    http_listen=self.http_url,
                    worker_processes=self._workers,
                    fail_timeout=self._fail_timeout,
                    affinity_key=self._affinity,
                )
            )
            self._proc = subprocess.Popen(
                [self._binary, "-g", "daemon off;", *self._args()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._wait_listening(timeout):
                return self
            self._proc.kill()
            self._proc.wait()
            if "Address already in use" not in self.error_log:
                break
        raise RuntimeError(f"nginx did not start:\n{self.error_log}")

    def _args(self) -> list[str]:
        return ["-p", str(self.dir), "-c", str(self.dir / "nginx.conf"), "-e", "logs/error.log"]

    def _wait_listening(self, timeout: float) -> bool:
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            try:
                for port in (self.grpc_port, self.http_port):
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                time.sleep(0.05)
                continue
            return True
        return False

    @property
    def error_log(self) -> str:
        path = self.dir / "logs" / "error.log"
        return path.read_text() if path.exists() else ""

    def access_log(self) -> list[AccessRecord]:
        path = self.dir / "logs" / "access.log"
        records = []
        for line in path.read_text().splitlines() if path.exists() else []:
            match = _ACCESS.search(line)
            assert match, f"unexpected access log line: {line}"
            records.append(
                AccessRecord(
                    client=match["client"],
                    request=match["request"],
                    status=int(match["status"]),
                    sequence=match["seq"],
                    upstreams=tuple(match["up"].split(", ")),
                    upstream_statuses=tuple(match["ust"].split(", ")),
                    grpc_status=match["grpc"],
                )
            )
        return records

    def stop(self, timeout: float = 10.0) -> None:
        """SIGQUIT (graceful), then SIGKILL past ``timeout``; the directory is removed."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGQUIT)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """N replicas started together, and the balancer in front of them."""

    def __init__(self, replicas: Sequence[Replica], **balancer_options: str) -> None:
        self.replicas = list(replicas)
        self._options = balancer_options
        self.balancer: Balancer | None = None

    def start(self) -> Self:
        self.start_replicas(self.replicas)
        with_http = all(r.http_port for r in self.replicas)
        self.balancer = Balancer(
            [r.grpc_url for r in self.replicas],
            [r.http_url for r in self.replicas] if with_http else ["127.0.0.1:9"],
            **self._options,
        ).start()
        return self

    @staticmethod
    def start_replicas(replicas: Sequence[Replica]) -> None:
        """Concurrently: each waits mostly on its own start-up."""
        errors: list[BaseException] = []

        def start(replica: Replica) -> None:
            try:
                replica.start()
            except BaseException as exc:  # re-raised below, in the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(r,)) for r in replicas]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def stop(self) -> None:
        if self.balancer is not None:
            self.balancer.stop()
        for replica in self.replicas:
            replica.kill()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
