"""Schedulers: how requests reach model instances (default, dynamic batching, sequences)."""
