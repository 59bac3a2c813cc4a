"""The sticky-sequence header for replicas behind a load balancer.

The requests of one sequence must reach the replica that holds its state. A balancer
cannot read the correlation id inside a request body, so the gateway copies the request's
``sequence_id`` parameter into the ``triton-sequence-id`` metadata of its ModelInfer (and
generate's ModelStreamInfer) call, and the balancer hashes on that header
(deploy/nginx/: ``hash $http_triton_sequence_id consistent``). gRPC clients that call a
balancer directly send the same header themselves (tritonclient: ``headers=``).
"""

from __future__ import annotations

from inference import grpc_service_pb2 as pb

__all__ = ["SEQUENCE_HEADER", "with_sequence_header"]

#: gRPC metadata / HTTP header name; nginx sees it as ``$http_triton_sequence_id``.
SEQUENCE_HEADER = "triton-sequence-id"

Metadata = tuple[tuple[str, str], ...]


def with_sequence_header(request: pb.ModelInferRequest, metadata: Metadata) -> Metadata:
    """``metadata`` plus the header when ``request`` belongs to a sequence (a non-zero or
    non-empty ``sequence_id``); otherwise ``metadata`` unchanged (the common case costs
    one map lookup)."""
    parameters = request.parameters
    if "sequence_id" not in parameters:
        return metadata
    param = parameters["sequence_id"]
    kind = param.WhichOneof("parameter_choice")
    if kind == "int64_param":
        value = str(param.int64_param) if param.int64_param else ""
    elif kind == "uint64_param":
        value = str(param.uint64_param) if param.uint64_param else ""
    elif kind == "string_param":
        value = param.string_param
    else:  # a wrong type: the service refuses the request with Triton's text
        return metadata
    return (*metadata, (SEQUENCE_HEADER, value)) if value else metadata
