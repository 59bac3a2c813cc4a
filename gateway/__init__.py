"""The REST gateway: a separate process serving the KServe v2 / Triton HTTP API by calling
the inference service over gRPC (``python -m gateway --grpc-target HOST:PORT``).

Its routes are declared on the protos (``(inference.http_route)`` options), it holds no
model state, and it shares nothing with ``service`` but the generated protos. Importing
the package imports nothing else: ``python -m gateway`` sets grpc's environment before
grpc is first imported (``__main__.py``).
"""
