"""A frontend process: the gRPC servicer over an engine client (``--frontends N``)."""
