"""What the service and the gateway both speak, written once: the v2 datatypes and the BYTES
and BF16 wire forms, the header-forward pattern, the trace settings' grammar and sampler,
the restricted-API groups, the local socket's frame format, the shared-memory ring channel,
and the heap trimmer both run after a large refused request.

It sits beside the generated ``inference`` package because it is part of the same contract:
both processes import it, and the gateway still imports nothing of ``service``.
"""
