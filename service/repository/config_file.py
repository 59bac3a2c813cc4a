"""Reading ``config.pbtxt`` into a ``ModelConfig`` and filling the fields Triton derives.

Backend-specific completion (tensors from the model file) lives in ``completion.py``;
this module only knows the file format and the platform/backend naming rules.
"""

from __future__ import annotations

from google.protobuf import text_format

from inference import model_config_pb2 as mc

from .layout import ModelDirectory

__all__ = ["ConfigError", "read_config"]

# platform <-> backend pairs Triton treats as the same thing, and each one's default file.
_PLATFORM_BACKEND = {
    "onnxruntime_onnx": "onnxruntime",
    "tensorrt_plan": "tensorrt",
    "pytorch_libtorch": "pytorch",
    "tensorflow_savedmodel": "tensorflow",
}
_DEFAULT_FILENAME = {
    "onnxruntime": "model.onnx",
    "tensorrt": "model.plan",
    "python": "model.py",
    "pytorch": "model.pt",
    "openvino": "model.xml",
    "tensorflow": "model.savedmodel",
}
_SUFFIX_BACKEND = {
    ".onnx": "onnxruntime",
    ".plan": "tensorrt",
    ".pt": "pytorch",
    ".savedmodel": "tensorflow",
}


class ConfigError(ValueError):
    """A config that cannot be used; the message becomes the model's UNAVAILABLE reason."""


def read_config(model: ModelDirectory, override: mc.ModelConfig | None = None) -> mc.ModelConfig:
    """The model's config: ``override`` (from a load request) replaces config.pbtxt."""
    config = mc.ModelConfig()
    if override is not None:
        config.CopyFrom(override)
    elif model.config_path.is_file():
        try:
            text_format.Parse(model.config_path.read_text(encoding="utf-8"), config)
        except (text_format.ParseError, UnicodeDecodeError) as exc:
            raise ConfigError(f"failed to parse {model.config_path.name}: {exc}") from exc
    if not config.name:
        config.name = model.name
    elif config.name != model.name:
        raise ConfigError(
            f"unexpected 'name' in {model.config_path.name}: expected '{model.name}', "
            f"got '{config.name}'"
        )
    _settle_backend(config, model)
    return config


def _settle_backend(config: mc.ModelConfig, model: ModelDirectory) -> None:
    """Make ``platform`` and ``backend`` agree, guessing from the files when both are empty."""
    if config.platform and not config.backend:
        config.backend = _PLATFORM_BACKEND.get(config.platform, "")
    if config.backend and not config.platform:
        for platform, backend in _PLATFORM_BACKEND.items():
            if backend == config.backend:
                config.platform = platform
    if not config.backend and config.platform not in ("", "ensemble"):
        raise ConfigError(f"unknown platform '{config.platform}'")
    if not config.backend and not config.platform:
        guessed = _guess_backend(model)
        if guessed is None:
            raise ConfigError(
                "unable to infer the backend: set 'backend' or 'platform' in config.pbtxt"
            )
        config.backend = guessed
        _settle_backend(config, model)
        return
    if not config.default_model_filename and config.backend in _DEFAULT_FILENAME:
        if config.backend == "pytorch" and config.runtime == "model.py":
            return  # Triton: the PyTorch 2 runtime looks for model.py, then model.pt
        config.default_model_filename = _DEFAULT_FILENAME[config.backend]


def _guess_backend(model: ModelDirectory) -> str | None:
    for version in reversed(model.versions):
        for child in sorted(model.version_path(version).iterdir()):
            if child.name == "model.py":
                return "python"
            if child.name == "model.xml":  # Triton's core: OpenVINO's default file
                return "openvino"
            backend = _SUFFIX_BACKEND.get(child.suffix)
            if backend is not None:
                return backend
    return None
