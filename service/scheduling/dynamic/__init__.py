"""Dynamic batching: Triton's batching rule, its queues and the two drivers."""
