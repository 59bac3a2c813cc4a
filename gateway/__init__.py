"""The REST gateway: a separate process mapping v2 REST JSON onto the gRPC service.

It is built as its own issue on top of the gRPC service; until then this package holds
nothing, and the service is reached over gRPC only.
"""
