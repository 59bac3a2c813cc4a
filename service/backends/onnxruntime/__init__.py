"""ONNX Runtime backend: one InferenceSession per instance."""

from .backend import OnnxRuntimeBackend

__all__ = ["OnnxRuntimeBackend"]
