"""Triton's OpenVINO backend (``backend: "openvino"``): OpenVINO IR (``model.xml`` with its
``model.bin``) and the other formats OpenVINO reads (ONNX), run on the CPU.

Only ``backend.py`` imports openvino (the optional ``openvino`` extra); ``rules`` holds the
backend's parameters, datatypes and shape checks as pure functions, so that a config is
judged the same way with or without openvino, and their tests run everywhere.
"""
