"""The gateway's v1 pieces without processes: route table, header text, body sizes."""

from __future__ import annotations

from google.protobuf import text_format

from gateway.routes import Router, load_routes, load_v1_routes
from gateway.v1_http import _fixed_size, one_line
from inference import model_config_pb2 as mc
from trtis import api_pb2 as api
from trtis import request_status_pb2 as rs


def test_v1_routes_come_from_the_v1_service_options() -> None:
    routes = {r.rpc: r for r in load_v1_routes()}
    assert set(routes) == {
        "Status",
        "Health",
        "Infer",
        "ModelControl",
        "SharedMemoryControl",
        "Repository",
    }  # StreamInfer is gRPC only
    router = Router(load_routes() + load_v1_routes())
    route, _, params = router.match("POST", b"/api/infer/add_sub/3")
    assert (route.rpc, params) == ("Infer", {"model_name": "add_sub", "model_version": "3"})
    route, _, params = router.match("POST", b"/api/modelcontrol/load/m")
    assert (route.rpc, params) == ("ModelControl", {"type": "load", "model_name": "m"})
    assert router.match("GET", b"/api/status")[0].rpc == "Status"
    assert router.match("GET", b"/v2/health/live")[0].rpc == "ServerLive"


def test_one_line_status_is_ascii_and_parses_back() -> None:
    status = rs.RequestStatus(code=rs.NOT_FOUND, msg="model 'caf\u00e9 \u20ac' \"x\"\nz")
    text = one_line(status)
    assert text.isascii() and "\n" not in text
    assert text_format.Parse(text, rs.RequestStatus()) == status


def test_fixed_sizes_follow_v1_rules() -> None:
    config = text_format.Parse(
        'max_batch_size: 8 input { name: "A" data_type: TYPE_FP32 dims: [ -1, 3 ] } '
        'input { name: "S" data_type: TYPE_STRING dims: [ 1 ] } '
        'input { name: "F" data_type: TYPE_INT16 dims: [ 2 ] }',
        mc.ModelConfig(),
    )
    given = api.InferRequestHeader.Input
    assert _fixed_size(config, given(name="A", dims=[2, 3]), 4) == 2 * 3 * 4 * 4
    assert _fixed_size(config, given(name="A"), 4) is None  # variable dims, none given
    assert _fixed_size(config, given(name="S"), 1) is None  # strings: no fixed size
    assert _fixed_size(config, given(name="F"), 3) == 2 * 2 * 3
    assert _fixed_size(config, given(name="X"), 1) is None
    config.max_batch_size = 0
    assert _fixed_size(config, given(name="F"), 3) == 4  # no batching: batch_size ignored
