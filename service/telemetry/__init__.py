"""Operations surface: Prometheus metrics, logging set-up, OpenTelemetry tracing.

Nothing in the core imports this package; the composition root (``service/app.py``) wires
it to the core and the gRPC frontend.
"""
