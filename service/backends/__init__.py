"""Backends: what turns a model file into instances that execute tensors."""
