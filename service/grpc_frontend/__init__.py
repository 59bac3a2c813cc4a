"""Protocol handlers: gRPC messages in, core calls, gRPC messages out."""
