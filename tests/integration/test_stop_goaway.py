"""gRPC connections end with GOAWAY at a graceful stop, as Triton's do.

The real Triton 2.51 here ends an idle connection at SIGTERM with GOAWAY (last stream id
2^31-1, NO_ERROR), a PING, the final GOAWAY, then FIN. The service sends it once every
answer is out and its connections are quiet (``service/grpc_frontend/goaway.py``):
callers that keep sending to the end still get UNAVAILABLE, never CANCELLED
(``test_shutdown_edges.py``). Both process layouts: in the split one each frontend ends
its own connections.
"""

from __future__ import annotations

import signal

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from h2_frames import GOAWAY, FrameWatcher
from server_process import ServerProcess

_NO_ERROR = 0


def _add_sub(client: grpcclient.InferenceServerClient) -> None:
    data = np.ones((1, 4), dtype=np.float32)
    inputs = [grpcclient.InferInput(name, [1, 4], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    result = client.infer("add_sub", inputs)
    assert (result.as_numpy("OUTPUT0") == 2).all()


@pytest.mark.parametrize("frontends", ["0", "2"])
def test_an_idle_connection_ends_with_goaway(frontends: str) -> None:
    server = ServerProcess(extra_args=["--frontends", frontends]).start()
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            _add_sub(client)  # a client's connection, used and then idle
            watcher = FrameWatcher("127.0.0.1", server.port).start()
            server.send_signal(signal.SIGTERM)
            watcher.join(60)
            assert server.wait(60) == 0, server.log
    finally:
        server.kill()
    goaways = [frame.goaway for frame in watcher.of_kind(GOAWAY)]
    assert goaways, (watcher.end, watcher.frames)
    assert goaways[0] == (2**31 - 1, _NO_ERROR), goaways  # grpc's graceful first GOAWAY
    assert goaways[-1][1] == _NO_ERROR, goaways
    assert watcher.end == "eof", watcher.end  # then a FIN, not a reset
