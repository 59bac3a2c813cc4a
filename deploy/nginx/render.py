"""Write nginx.conf for N replicas from nginx.conf.template (standard library only).

    mkdir -p /tmp/lb/logs /tmp/lb/temp
    python3 deploy/nginx/render.py \\
        --grpc-server 10.0.0.1:8001 --grpc-server 10.0.0.2:8001 \\
        --http-server 10.0.0.1:8000 --http-server 10.0.0.2:8000 \\
        --grpc-listen 8001 --http-listen 8000 -o /tmp/lb/nginx.conf
    nginx -p /tmp/lb -c /tmp/lb/nginx.conf -e /tmp/lb/logs/error.log

By default pid, logs and temporary files live under nginx's ``-p`` prefix (no root
needed, one balancer per directory: what the tests do); ``--container`` sends the logs
to stdout/stderr and keeps the rest in /tmp (an unprivileged container with a read-only
root file system). ``--resolve`` re-resolves the server names every few seconds
through ``--resolver`` (nginx >= 1.27.3): a Kubernetes headless Service's name then
follows the pods as they come and go (deploy/k8s/balancer/).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Layout", "render", "server_lines"]

TEMPLATE = Path(__file__).with_name("nginx.conf.template")
_SLOT = re.compile(r"\{\{ (\w+) \}\}")


@dataclass(frozen=True)
class Layout:
    """Where nginx keeps its pid, logs and temporary files."""

    pid: str
    error_log: str
    access_log: str
    temp_dir: str


#: Under the ``-p`` prefix (relative paths resolve there).
PREFIX = Layout("nginx.pid", "logs/error.log", "logs/access.log", "temp")
#: In a container: logs to the container's streams, the rest in /tmp.
CONTAINER = Layout("/tmp/nginx.pid", "/dev/stderr", "/dev/stdout", "/tmp")


def server_lines(
    addresses: Sequence[str], *, max_fails: int, fail_timeout: str, resolve: bool
) -> str:
    """One ``server`` line per replica address (host:port)."""
    options = f"max_fails={max_fails} fail_timeout={fail_timeout}"
    if resolve:
        options = f"resolve {options}"
    return "\n".join(f"        server {address} {options};" for address in addresses)


def render(
    grpc_servers: Sequence[str],
    http_servers: Sequence[str],
    *,
    grpc_listen: str = "8001",
    http_listen: str = "8000",
    layout: Layout = PREFIX,
    worker_processes: str = "auto",
    max_fails: int = 1,
    fail_timeout: str = "5s",
    resolver: str = "",
    resolve: bool = False,
) -> str:
    """The whole nginx.conf. ``resolve`` needs ``resolver`` (a DNS server address)."""
    if not grpc_servers or not http_servers:
        raise ValueError("at least one gRPC and one HTTP replica address are needed")
    if resolve and not resolver:
        raise ValueError("--resolve needs --resolver")

    def lines(addresses: Sequence[str]) -> str:
        return server_lines(
            addresses, max_fails=max_fails, fail_timeout=fail_timeout, resolve=resolve
        )

    values = {
        "worker_processes": worker_processes,
        "pid": layout.pid,
        "error_log": layout.error_log,
        "access_log": layout.access_log,
        "temp_dir": layout.temp_dir,
        "resolver": f"    resolver {resolver} valid=5s;\n" if resolver else "",
        "grpc_servers": lines(grpc_servers),
        "http_servers": lines(http_servers),
        "grpc_listen": grpc_listen,
        "http_listen": http_listen,
    }
    text = TEMPLATE.read_text()
    missing = set(_SLOT.findall(text)) - set(values)
    if missing:
        raise ValueError(f"the template has slots render() does not fill: {sorted(missing)}")
    # A slot alone on its line (resolver) leaves no blank line when it is empty.
    text = text.replace("{{ resolver }}\n", values["resolver"])
    return _SLOT.sub(lambda m: str(values[m.group(1)]), text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grpc-server", action="append", required=True, metavar="HOST:PORT")
    parser.add_argument("--http-server", action="append", required=True, metavar="HOST:PORT")
    parser.add_argument("--grpc-listen", default="8001", metavar="[ADDR:]PORT")
    parser.add_argument("--http-listen", default="8000", metavar="[ADDR:]PORT")
    parser.add_argument("--container", action="store_true", help="logs to stdout/stderr")
    parser.add_argument("--worker-processes", default="auto")
    parser.add_argument("--max-fails", type=int, default=1)
    parser.add_argument("--fail-timeout", default="5s")
    parser.add_argument("--resolver", default="", help="DNS server for --resolve")
    parser.add_argument("--resolve", action="store_true", help="re-resolve names (>= 1.27.3)")
    parser.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    args = parser.parse_args(argv)
    try:
        text = render(
            args.grpc_server,
            args.http_server,
            grpc_listen=args.grpc_listen,
            http_listen=args.http_listen,
            layout=CONTAINER if args.container else PREFIX,
            worker_processes=args.worker_processes,
            max_fails=args.max_fails,
            fail_timeout=args.fail_timeout,
            resolver=args.resolver,
            resolve=args.resolve,
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
