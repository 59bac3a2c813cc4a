"""The local RPC socket: the service's server (grpc_frontend/local_rpc.py) against the gateway's
client (gateway/local_rpc.py), with stand-in method handlers on a loop in a thread."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from gateway.local_rpc import LocalChannel, LocalRpcError, LocalStub
from inference import grpc_service_pb2 as pb
from service.grpc_frontend.local_rpc import LocalRpcServer, bind_local_socket
from service.grpc_frontend.registration import parser

SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
PATH = "/inference.GRPCInferenceService/"


class Behaviour:
    """ModelMetadata answers by request name: echo, refuse, abort, raise or wait."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.done: list[str] = []

    async def metadata(self, request: Any, context: Any) -> Any:
        if not isinstance(request, pb.ModelMetadataRequest):
            context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
            context.set_details(request.message)
            return None
        context.add_done_callback(lambda _: self.done.append(request.name))
        name = request.name
        if name == "refuse":
            context.set_code(grpc.StatusCode.NOT_FOUND)
            context.set_details("Request for unknown model: 'refuse' is not found")
            return None
        if name == "abort":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "aborted here")
        if name == "raise":
            raise RuntimeError("boom")
        if name == "none":
            return None  # no status set either: the serializer fails, as under grpc.aio
        if name == "wait":
            await asyncio.to_thread(self.release.wait, 10)
        metadata = ",".join(f"{k}={v}" for k, v in context.invocation_metadata())
        return pb.ModelMetadataResponse(name=name, platform=metadata)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Behaviour]]:
    path = str(tmp_path / "rpc.sock")
    behaviour = Behaviour()
    methods = {
        PATH + "ModelMetadata": grpc.unary_unary_rpc_method_handler(
            behaviour.metadata,
            request_deserializer=parser(pb.ModelMetadataRequest),
            response_serializer=pb.ModelMetadataResponse.SerializeToString,
        )
    }
    loop = asyncio.new_event_loop()
    server = LocalRpcServer(methods, max_message_bytes=4096)
    listening = bind_local_socket(path)
    loop.run_until_complete(server.start(listening))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield path, behaviour
    behaviour.release.set()
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    # The rest here, the loop run only between steps, so that no socket is left to a later
    # test's garbage collection (a ResourceWarning there fails that test). Stop listening
    # (connections still in the backlog go with it); let every task end: an accept in
    # flight is a task that makes its transport and calls connection_made before it ends,
    # a waiting call answers; then end every connection and run the loop until each is
    # lost, which closes its socket. (Short sleeps instead left, under load, a transport
    # made after the last close: two CI runs failed so.)
    server.close()
    tasks = asyncio.all_tasks(loop)
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=5))
    server.close_connections()
    deadline = time.monotonic() + 5
    while server.connections and time.monotonic() < deadline:
        loop.run_until_complete(asyncio.sleep(0.001))
    assert not server.connections, server.connections
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()


def stub(path: str) -> tuple[LocalChannel, Any]:
    channel = LocalChannel(path)
    return channel, LocalStub(channel, SERVICE)


def test_answer_and_metadata_round_trip(served: tuple[str, Behaviour]) -> None:
    channel, calls = stub(served[0])
    answer = calls.ModelMetadata(
        pb.ModelMetadataRequest(name="m"), metadata=(("a", "1"), ("traceparent", "00-x"))
    )
    assert answer == pb.ModelMetadataResponse(name="m", platform="a=1,traceparent=00-x")
    assert calls.ModelMetadata(pb.ModelMetadataRequest(name="n")).platform == ""
    assert not hasattr(calls, "ModelStreamInfer")  # streams stay on gRPC
    channel.close()


@pytest.mark.parametrize(
    ("name", "code", "details"),
    [
        ("refuse", grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'refuse' is not found"),
        ("abort", grpc.StatusCode.FAILED_PRECONDITION, "aborted here"),
        ("raise", grpc.StatusCode.UNKNOWN, "Unexpected <class 'RuntimeError'>: boom"),
        ("none", grpc.StatusCode.UNKNOWN, "Unexpected <class 'TypeError'>: "),
    ],
)
def test_failures_keep_code_and_text(
    served: tuple[str, Behaviour], name: str, code: grpc.StatusCode, details: str
) -> None:
    channel, calls = stub(served[0])
    with pytest.raises(LocalRpcError) as failed:
        calls.ModelMetadata(pb.ModelMetadataRequest(name=name))
    assert failed.value.code() == code
    if name == "none":  # the rest of the text is protobuf's
        assert failed.value.details().startswith(details)
    else:
        assert failed.value.details() == details
    # The connection is fine afterwards and goes back to the pool.
    assert calls.ModelMetadata(pb.ModelMetadataRequest(name="ok")).name == "ok"
    assert len(channel._idle) == 1
    channel.close()


def test_done_callbacks_run_after_the_answer(served: tuple[str, Behaviour]) -> None:
    channel, calls = stub(served[0])
    calls.ModelMetadata(pb.ModelMetadataRequest(name="x"))
    with pytest.raises(LocalRpcError):
        calls.ModelMetadata(pb.ModelMetadataRequest(name="refuse"))
    deadline = time.monotonic() + 5
    while len(served[1].done) < 2 and time.monotonic() < deadline:
        time.sleep(0.001)  # they run on the server's thread, once the answer has gone
    assert served[1].done == ["x", "refuse"]
    channel.close()


def test_concurrent_callers_get_their_own_answers(served: tuple[str, Behaviour]) -> None:
    channel, calls = stub(served[0])
    names = [f"m{i}" for i in range(200)]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda n: calls.ModelMetadata(pb.ModelMetadataRequest(name=n)), names))
    assert [answer.name for answer in got] == names
    assert 1 <= len(channel._idle) <= 8  # connections are reused, one per concurrent call
    channel.close()


def test_close_fails_running_calls_as_a_closed_channel(served: tuple[str, Behaviour]) -> None:
    channel, calls = stub(served[0])
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(calls.ModelMetadata, pb.ModelMetadataRequest(name="wait"))
        while not channel._open:
            pass
        channel.close()
        with pytest.raises(LocalRpcError) as failed:
            running.result(5)
    assert (failed.value.code(), failed.value.details()) == (
        grpc.StatusCode.CANCELLED,
        "Channel closed",
    )
    with pytest.raises(LocalRpcError):
        calls.ModelMetadata(pb.ModelMetadataRequest(name="after"))


def test_no_service_is_unavailable(tmp_path: Path) -> None:
    _, calls = stub(str(tmp_path / "nobody.sock"))
    with pytest.raises(LocalRpcError) as failed:
        calls.ModelMetadata(pb.ModelMetadataRequest(name="m"))
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "failed to connect" in failed.value.details()


def raw_call(path: str, frame: bytes) -> tuple[int, str, bytes]:
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(path)
        conn.sendall(frame)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from("<I", data)[0]:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    code, length = struct.unpack_from("<BI", data, 4)
    return code, data[9 : 9 + length].decode(), data[9 + length :]


def call_frame(method: str, metadata: bytes, message: bytes) -> bytes:
    body = struct.pack("<HI", len(method), len(metadata)) + method.encode() + metadata + message
    return struct.pack("<I", len(body)) + body


def test_bad_frames_get_clear_errors_and_the_server_keeps_serving(
    served: tuple[str, Behaviour],
) -> None:
    path = served[0]
    code, text, _ = raw_call(path, call_frame(PATH + "Nope", b"", b""))
    assert (code, text) == (grpc.StatusCode.UNIMPLEMENTED.value[0], "Method not found!")
    code, text, _ = raw_call(path, call_frame(PATH + "ModelMetadata", b"", b"\xff\xff"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "not a valid inference.ModelMetadataRequest" in text
    lying = struct.pack("<I", 6) + struct.pack("<HI", 100, 100)  # lengths beyond the frame
    code, text, _ = raw_call(path, lying)
    assert code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and "malformed" in text
    bad_utf8 = call_frame(PATH + "ModelMetadata", b"\xff\0\xfe\0", b"")
    assert raw_call(path, bad_utf8)[0] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    huge = struct.pack("<I", 10**9)  # declared, never sent: refused before it is buffered
    code, text, _ = raw_call(path, huge)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert text.startswith("Received message larger than max (1000000000 vs.")
    channel, calls = stub(path)
    assert calls.ModelMetadata(pb.ModelMetadataRequest(name="still")).name == "still"
    channel.close()


def test_a_frame_in_pieces_and_two_frames_in_one_write(served: tuple[str, Behaviour]) -> None:
    one = call_frame(
        PATH + "ModelMetadata", b"", pb.ModelMetadataRequest(name="a").SerializeToString()
    )
    two = call_frame(
        PATH + "ModelMetadata", b"", pb.ModelMetadataRequest(name="b").SerializeToString()
    )
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(served[0])
        for piece in (one[:3], one[3:7], one[7:-1], one[-1:] + two):
            conn.sendall(piece)
            time.sleep(0.02)  # each piece its own read on the server
        names, data = [], b""
        while len(names) < 2:
            data += conn.recv(65536)
            while len(data) >= 4 and len(data) >= 4 + struct.unpack_from("<I", data)[0]:
                size = struct.unpack_from("<I", data)[0]
                code, length = struct.unpack_from("<BI", data, 4)
                assert code == 0
                names.append(pb.ModelMetadataResponse.FromString(data[9 + length : 4 + size]).name)
                data = data[4 + size :]
    assert sorted(names) == ["a", "b"]


def test_socket_is_private_stale_files_replaced_live_ones_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "rpc.sock")
    first = bind_local_socket(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(OSError, match="already in use"):
        bind_local_socket(path)
    first.close()  # the file stays behind, nobody listens: replaced
    second = bind_local_socket(path)
    second.close()
    with pytest.raises(OSError, match="failed to start local RPC socket"):
        bind_local_socket(str(tmp_path / "no" / "such" / "dir.sock"))
