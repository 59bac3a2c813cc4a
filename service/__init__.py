"""A Triton / KServe v2 compatible inference server built on grpc.aio."""

__version__ = "0.1.0"
# The project's own name (docs). On the wire the server answers to
# SERVER_ID, as Triton does ("triton", or what --id says): clients and Triton's own tests
# check ServerMetadata.name.
SERVER_NAME = "triton-compatible-server"
SERVER_ID = "triton"
