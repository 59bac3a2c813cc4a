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

``--client-affinity`` renders the client-affinity mode: every request of one client (by
its address, ``$remote_addr``, or the nginx variable given) reaches one replica, with or
without the triton-sequence-id header. For clients that keep state on the replica
without saying so in a header: shared-memory regions, sequences sent without the header,
model control (deploy/nginx/README.md, "Client affinity").
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CLIENT_ADDRESS", "Layout", "render", "server_lines"]

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

#: The client-affinity key unless another is given: the client's IP address (all of it;
#: ``ip_hash`` would use only the first three octets of an IPv4 address).
CLIENT_ADDRESS = "$remote_addr"
#: An nginx variable (what ``hash`` may key on without quoting).
_VARIABLE = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*")

_AFFINITY_NOTE = """\
#
# CLIENT AFFINITY (render.py --client-affinity), which overrides the routing above:
# every upstream below hashes one key, the client's {key},
# with or without the header, so all requests of one client reach one replica: the
# shared-memory regions it registered, the sequences it sends without the header and the
# models it loaded are where its next requests go. Per protocol: its gRPC and its REST
# requests may reach different replicas. The load is only as even as the clients are
# many; when a replica stops, its clients move to others, without their state.\
"""


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
    affinity_key: str = "",
) -> str:
    """The whole nginx.conf. ``resolve`` needs ``resolver`` (a DNS server address).
    ``affinity_key`` (an nginx variable, e.g. CLIENT_ADDRESS) selects client affinity:
    every request is hashed on it; empty, the default routing."""
    if not grpc_servers or not http_servers:
        raise ValueError("at least one gRPC and one HTTP replica address are needed")
    if resolve and not resolver:
        raise ValueError("--resolve needs --resolver")
    if affinity_key and not _VARIABLE.fullmatch(affinity_key):
        raise ValueError(f"--client-affinity takes an nginx variable, not {affinity_key!r}")

    def lines(addresses: Sequence[str]) -> str:
        return server_lines(
            addresses, max_fails=max_fails, fail_timeout=fail_timeout, resolve=resolve
        )

    if affinity_key:
        balance = sequence_balance = f"hash {affinity_key} consistent;  # client affinity"
    else:
        balance, sequence_balance = "least_conn;", "hash $http_triton_sequence_id consistent;"
    values = {
        "affinity_note": _AFFINITY_NOTE.format(key=affinity_key) if affinity_key else "",
        "balance": balance,
        "sequence_balance": sequence_balance,
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
    # A slot alone on its line (resolver, affinity_note) leaves no line when it is empty.
    text = text.replace("{{ resolver }}\n", values["resolver"])
    if not affinity_key:
        text = text.replace("{{ affinity_note }}\n", "")
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
    parser.add_argument(
        "--client-affinity",
        nargs="?",
        const=CLIENT_ADDRESS,
        default="",
        metavar="$VARIABLE",
        help=f"every request of one client to one replica, hashed on {CLIENT_ADDRESS} "
        "(or the nginx variable given): shared memory, sequences without the header",
    )
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
            affinity_key=args.client_affinity,
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
