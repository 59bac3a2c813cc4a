"""What hostile input costs the server: the figures behind docs/decisions.md, "Hostile input".

    .venv/bin/python -m loadtest hostile-bench memory [--size-mb 300 --count 6]
        service RSS (from /proc) before and after each refused oversized ModelInfer
        ("input byte size mismatch"), right after the answer and 0.5 s later
    .venv/bin/python -m loadtest hostile-bench parse
        per-request cost of our request parser (wire.py) over grpc's FromString
    .venv/bin/python -m loadtest hostile-bench inflate [--mb 1200 --encoding gzip|deflate]
        gateway CPU, wall time and peak memory to refuse a compression bomb of N MB inflated

Loopback only, bounded in count; each subcommand runs in well under a minute.
"""

from __future__ import annotations

import argparse
import resource
import time
import timeit
import zlib

import grpc
from server_process import ServerProcess

from inference import grpc_service_pb2 as pb
from loadtest.metrics import rss_mb as _rss_mb
from loadtest.scenario import Scenario, register


def _add_sub_request(input0_bytes: int) -> bytes:
    request = pb.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="FP32")
        tensor.shape.extend([1, 4])
    request.raw_input_contents.extend([bytes(input0_bytes), bytes(16)])
    return request.SerializeToString()


def memory(size_mb: int, count: int) -> None:
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with ServerProcess() as server, grpc.insecure_channel(server.url, options=options) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        message = _add_sub_request(size_mb << 20)
        time.sleep(0.5)
        print(f"baseline RSS {_rss_mb(server.pid):.0f} MB; {count} x {size_mb} MB refused")
        for index in range(count):
            try:
                call(message, timeout=120)
            except grpc.RpcError as error:
                code = error.code().name
            now = _rss_mb(server.pid)
            time.sleep(0.5)
            later = _rss_mb(server.pid)
            print(f"{index}: {code}  RSS {now:.0f} MB at the answer, {later:.0f} 0.5 s later")
        time.sleep(10)
        print(f"after 10 s idle: {_rss_mb(server.pid):.0f} MB")


def parse() -> None:
    from service.grpc_frontend.registration import Malformed, parser

    request = pb.ModelInferRequest(model_name="add_sub", id="1")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="FP32")
        tensor.shape.extend([1, 4])
        request.raw_input_contents.append(bytes(16))
    space = {
        "plain": pb.ModelInferRequest.FromString,
        "ours": parser(pb.ModelInferRequest),
        "data": request.SerializeToString(),
        "r": request,
        "Malformed": Malformed,
    }
    n = 100_000
    plain, ours = [], []
    for _ in range(15):  # interleaved, minimum of each: the least disturbed run
        plain.append(timeit.timeit("plain(data)", globals=space, number=n) / n * 1e9)
        ours.append(timeit.timeit("ours(data)", globals=space, number=n) / n * 1e9)
    check = min(timeit.repeat("r.__class__ is Malformed", globals=space, number=n, repeat=9))
    print(
        f"FromString {min(plain):.0f} ns, our parser {min(ours):.0f} ns "
        f"(+{min(ours) - min(plain):.0f} ns); Malformed check {check / n * 1e9:.0f} ns"
    )


def inflate(inflated_mb: int, encoding: str) -> None:
    from gateway.compression import decompress
    from gateway.config import DEFAULT_MAX_BODY_BYTES
    from gateway.errors import GatewayError

    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    block = bytes(1 << 20)
    bomb = b"".join(packer.compress(block) for _ in range(inflated_mb)) + packer.flush()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        decompress(bomb, encoding, DEFAULT_MAX_BODY_BYTES)
        status = 200
    except GatewayError as error:
        status = error.status
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{len(bomb) / 1e6:.2f} MB {encoding} inflating to {inflated_mb} MB, limit "
        f"{DEFAULT_MAX_BODY_BYTES >> 20} MB: {status} after {wall:.2f} s wall, {cpu:.2f} s CPU, "
        f"peak RSS +{peak - before:.0f} MB"
    )


@register
class HostileBench(Scenario):
    """What hostile input costs: memory after refusals, parse cost, compression bombs."""

    name = "hostile-bench"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="what", required=True)
        mem = sub.add_parser("memory")
        mem.add_argument("--size-mb", type=int, default=300)
        mem.add_argument("--count", type=int, default=6)
        sub.add_parser("parse")
        inf = sub.add_parser("inflate")
        inf.add_argument("--mb", type=int, default=1200)
        inf.add_argument("--encoding", choices=("gzip", "deflate"), default="gzip")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        if args.what == "memory":
            memory(args.size_mb, args.count)
        elif args.what == "parse":
            parse()
        else:
            inflate(args.mb, args.encoding)
        return 0
