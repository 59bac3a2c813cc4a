"""triton_python_backend_utils, the config's JSON form, and the worker channel, in-process."""

from __future__ import annotations

import gc
import json
import os
import socket
import threading
from typing import Any

import numpy as np
import pytest

from inference import model_config_pb2 as mc
from service.backends.python import triton_python_backend_utils as pb_utils
from service.backends.python.config_json import apply_completed, config_to_json
from service.backends.python.protocol import Channel, ChannelClosed


def test_tensor_types_follow_triton() -> None:
    assert pb_utils.Tensor("x", np.zeros(2, np.float32)).triton_dtype() == 11
    assert pb_utils.Tensor("x", np.zeros(2, np.bool_)).triton_dtype() == 1
    strings = pb_utils.Tensor("s", np.array(["a", "b"]))  # numpy str arrays become BYTES
    assert strings.triton_dtype() == 13 and strings.as_numpy().tolist() == [b"a", b"b"]
    assert pb_utils.numpy_to_triton_type(np.int64) == 9
    assert pb_utils.triton_to_numpy_type(8) is np.int32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    reinterpret = pb_utils.Tensor("r", np.zeros(2, np.uint16), triton_dtype=10)
    assert reinterpret.as_numpy().dtype == np.float16
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.Tensor("c", np.zeros(2, np.complex64))
    items = np.array([b"ab", "c\u00e9"], dtype=np.object_)
    assert pb_utils.deserialize_bytes_tensor(pb_utils.serialize_byte_tensor(items)).tolist() == [
        b"ab",
        "c\u00e9".encode(),
    ]


def test_received_inputs_are_the_tensors_the_constructor_makes() -> None:
    """The worker wraps the inputs it unpacks without the constructor's conversions
    (decision 066): the same names, arrays, codes and shapes, and a numpy bytes or str
    array still becomes a BYTES tensor of ``bytes`` items."""
    arrays = [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.array([[True], [False]]),
        np.array([b"a", "b"], dtype=np.object_),
        np.array([b"ab", b"c"]),
        np.array(["x", "yz"]),
    ]
    for array in arrays:
        made, received = pb_utils.Tensor("t", array), pb_utils.Tensor._received("t", array)
        assert received.name() == made.name() == "t"
        assert received.triton_dtype() == made.triton_dtype()
        assert received.shape() == made.shape() and received.is_cpu()
        assert received.as_numpy().dtype == made.as_numpy().dtype
        assert received.as_numpy().tolist() == made.as_numpy().tolist()
    assert pb_utils.Tensor._received("s", np.array(["x"])).as_numpy().tolist() == [b"x"]


def test_response_sender_rules() -> None:
    sent: list[tuple[Any, bool]] = []
    final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

    def emit(response: Any, is_final: bool) -> None:
        sent.append((response, is_final))

    decoupled = pb_utils.InferenceResponseSender(emit, lambda: False, decoupled=True)
    response = pb_utils.InferenceResponse([])
    decoupled.send(response)
    decoupled.send(response)
    decoupled.send(flags=final)
    assert sent == [(response, False), (response, False), (None, True)]
    with pytest.raises(pb_utils.TritonModelException, match="closed"):
        decoupled.send(response)
    sent.clear()
    single = pb_utils.InferenceResponseSender(emit, lambda: True, decoupled=False)
    with pytest.raises(pb_utils.TritonModelException, match="cannot send complete final before"):
        single.send(flags=final)  # Triton's text, as the model gets it
    single.send(response)  # goes out at once, as in Triton; the final flag follows
    assert sent == [(response, False)] and single.is_cancelled()
    with pytest.raises(pb_utils.TritonModelException, match="more than one"):
        single.send(response)
    single.send(flags=final)
    assert sent == [(response, False), (None, True)]
    with pytest.raises(pb_utils.TritonModelException, match="Unsupported flag"):
        single.send(response, flags=4)
    with pytest.raises(pb_utils.TritonModelException, match="must be provided"):
        single.send()
    request = pb_utils.InferenceRequest(request_id="r", inputs=[], sender=single)
    with pytest.raises(pb_utils.TritonModelException, match="BLS"):
        request.exec()


def test_model_config_setters_follow_triton_rules() -> None:
    config = pb_utils.ModelConfig(json.dumps({"name": "m", "max_batch_size": 8, "input": []}))
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [3]})
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [3]})  # same: no-op
    assert config.as_dict()["input"] == [{"name": "A", "data_type": "TYPE_FP32", "dims": [3]}]
    with pytest.raises(ValueError, match="expects datatype TYPE_FP32"):
        config.add_input({"name": "A", "data_type": "TYPE_INT8", "dims": [3]})
    with pytest.raises(ValueError, match="other than"):
        config.add_output({"name": "B", "data_type": "TYPE_FP32", "dims": [1], "bogus": 1})
    with pytest.raises(ValueError, match="missing 'dims'"):
        config.add_output({"name": "B", "data_type": "TYPE_FP32"})
    with pytest.raises(ValueError, match="max_batch_size 8"):
        config.set_max_batch_size(4)
    config.set_max_batch_size(16)
    config.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError, match="decoupled"):
        config.set_model_transaction_policy({"decoupled": False})
    config.as_dict()["sequence_batching"] = {}
    with pytest.raises(ValueError, match="sequence_batching"):
        config.set_dynamic_batching()


def test_config_json_has_numbers_and_omits_unset_messages() -> None:
    config = mc.ModelConfig(name="m", backend="python", max_batch_size=2)
    config.input.add(name="X", data_type=mc.TYPE_FP32, dims=[4, -1])
    as_dict = json.loads(config_to_json(config))
    assert as_dict["input"][0]["dims"] == [4, -1]
    assert as_dict["max_batch_size"] == 2 and as_dict["output"] == []
    assert "model_transaction_policy" not in as_dict
    as_dict["output"].append({"name": "Y", "data_type": "TYPE_FP32", "dims": [4]})
    as_dict["model_transaction_policy"] = {"decoupled": True}
    apply_completed(config, json.dumps(as_dict))
    assert config.output[0].name == "Y" and config.model_transaction_policy.decoupled
    with pytest.raises(ValueError, match="invalid config"):
        apply_completed(config, json.dumps({"name": "m", "no_such_field": 1}))


def test_channel_moves_large_tensors_through_reused_shared_regions() -> None:
    left_sock, right_sock = socket.socketpair()
    left, right = Channel(left_sock, inline_limit=1024), Channel(right_sock, inline_limit=1024)
    try:
        big = np.arange(300_000, dtype=np.float32)
        small = np.array([[1, 2]], dtype=np.int16)
        text = np.array([b"x" * 2000, b""], dtype=np.object_)
        regions = []
        kept = None
        for round_ in range(4):
            packed = left.pack([[("big", big + round_), ("small", small)], [("text", text)]])
            assert packed.region is not None
            regions.append(packed.region.id)
            left.send(("data", packed.refs, packed.region), packed.fd)
            if packed.fd is not None:
                os.close(packed.fd)
            message, fd = right.recv()
            (first, second) = right.unpack(message[1], message[2], fd)
            arrays = dict(first + second)
            assert np.array_equal(arrays["big"], big + round_)
            assert arrays["small"].dtype == np.int16 and arrays["small"].tolist() == [[1, 2]]
            assert arrays["text"].tolist() == [b"x" * 2000, b""]
            arrays["big"][0] = -1  # receivers may write into what they got
            if round_ == 1:
                kept = arrays["big"]  # held on to: its region must not be reused
            del arrays, first, second
            gc.collect()
            right.send(("ack",))  # carries the released regions back
            left.recv()
        assert kept is not None and kept[1] == 1 + 1  # round 1 data, not overwritten
        assert regions[0] == regions[1] != regions[2] and regions[2] == regions[3]
    finally:
        left.close()
        right.close()


def _frame(message: tuple[Any, ...]) -> bytes:
    """The bytes ``Channel.send`` writes for ``message`` (read back from a spare pair)."""
    spare, raw = socket.socketpair()
    try:
        Channel(spare).send(message)
        return raw.recv(1 << 16)
    finally:
        spare.close()
        raw.close()


def test_recv_within_is_bounded_keeps_a_partial_message_and_sees_a_dead_peer() -> None:
    """Nothing to read: None once the bound passes (not a hang), a partial message too,
    its bytes kept for the next read; then the message whole; ChannelClosed once the
    peer is gone, and on a link closed here."""
    left_sock, right_sock = socket.socketpair()
    right = Channel(right_sock)
    try:
        assert right.recv_within(0.05) is None
        assert right.recv_within(0.002) is None  # a new bound: a new receive timeout
        frame = _frame(("hello", 7, b"x" * 300))
        left_sock.sendall(frame[:5])  # the header and a little: not a message yet
        assert right.recv_within(0.05) is None
        left_sock.sendall(frame[5:] + frame)  # its rest, and the same message again
        assert right.recv_within(0.05) == (("hello", 7, b"x" * 300), None)
        assert right.recv_within(0.05) == (("hello", 7, b"x" * 300), None)  # buffered
        left_sock.close()
        with pytest.raises(ChannelClosed):
            right.recv_within(None)
        right.close_link()
        with pytest.raises(ChannelClosed):
            right.recv_within(0.05)
    finally:
        left_sock.close()
        right.close()


def test_shutdown_wakes_a_reader_and_close_link_spares_the_sibling_regions() -> None:
    """``shutdown`` ends a read blocked in another thread (the reader thread shuts the
    calls link when its worker died); ``close_link`` closes one link and leaves the
    regions it shares with its sibling to whoever closes that one."""
    calls_left, calls_right = socket.socketpair()
    services_left, services_right = socket.socketpair()
    calls = Channel(calls_left, inline_limit=1024)
    services = calls.sibling(services_left)
    peer = Channel(services_right, inline_limit=1024)
    try:
        ended: list[BaseException] = []

        def read() -> None:
            try:
                calls.recv()
            except (ChannelClosed, OSError) as exc:
                ended.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        calls.shutdown()
        reader.join(60)
        assert not reader.is_alive() and isinstance(ended[0], ChannelClosed)
        calls.close_link()
        assert calls.sock.fileno() < 0
        packed = services.pack([[("big", np.arange(10_000, dtype=np.float32))]])
        assert packed.region is not None  # the shared pool still serves the sibling
        services.send(("data", packed.refs, packed.region), packed.fd)
        if packed.fd is not None:
            os.close(packed.fd)
        message, fd = peer.recv()
        ((_, array),) = peer.unpack(message[1], message[2], fd)[0]
        assert array[-1] == 9_999
    finally:
        calls.close_link()
        services.close()
        peer.close()
        calls_right.close()


def test_channel_keeps_order_across_large_and_descriptor_messages() -> None:
    """Large envelopes (several reads each) and messages that bring a region's
    descriptor arrive in the order sent among small ones, each descriptor with its own
    message; then nothing more, and ``recv_within`` comes back within its bound."""
    left_sock, right_sock = socket.socketpair()
    left, right = Channel(left_sock, 1 << 20), Channel(right_sock, 1 << 20)
    try:
        big = np.arange(200_000, dtype=np.float64)  # 1.6 MB: a region, its descriptor
        sizes = {"blob": 600 << 10, "tensor": big.nbytes, "small": 1}
        kinds = ["small", "blob", "tensor"] * 2
        got: list[tuple[str, int, int]] = []

        def read() -> None:  # another thread: the large sends block until read
            for _ in kinds:
                message, fd = right.recv()
                if message[0] == "tensor":
                    (((_, array),),) = right.unpack(message[2], message[3], fd)
                    assert array[0] == message[1]
                    got.append(("tensor", message[1], array.nbytes))
                else:
                    assert fd is None
                    got.append((message[0], message[1], len(message[2])))

        reader = threading.Thread(target=read)
        reader.start()
        for i, kind in enumerate(kinds):
            if kind == "blob":
                left.send(("blob", i, bytes([i]) * sizes["blob"]))
            elif kind == "tensor":
                packed = left.pack([[("big", big + i)]])
                left.send(("tensor", i, packed.refs, packed.region), packed.fd)
                if packed.fd is not None:
                    os.close(packed.fd)
            else:
                left.send(("small", i, b"s"))
        reader.join(60)
        assert got == [(kind, i, sizes[kind]) for i, kind in enumerate(kinds)]
        assert not right.pending()
        assert right.recv_within(0.01) is None
    finally:
        left.close()
        right.close()
