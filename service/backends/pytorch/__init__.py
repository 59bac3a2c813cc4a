"""Triton's PyTorch backend (``platform: "pytorch_libtorch"`` / ``backend: "pytorch"``):
TorchScript ``model.pt`` files run with ``torch.jit``.

Only ``backend.py`` imports torch (the optional ``torch`` extra); ``naming`` and
``options`` are the backend's rules as pure functions, so that a config is judged the
same way with or without torch, and their tests run everywhere.
"""
