"""A Triton / KServe v2 compatible inference server built on grpc.aio."""

__version__ = "0.1.0"
SERVER_NAME = "triton-compatible-server"
