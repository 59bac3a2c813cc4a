#!/usr/bin/env bash
# Collect, on a machine with package-registry access, the wheels a GPU machine without network
# needs to run this project's GPU tests and benchmark with that machine's own Python 3.12
# (the one that holds PyTorch, CUDA 13 libraries, numpy, onnx, pytest, nvidia-ml-py):
#   .whl/      the project's runtime dependencies that image lacks (a few MB)
#   .whl-ort/  onnxruntime-gpu, split into parts of at most PART_MB MB, each small enough to
#              travel in one call of a tool whose transfers are capped (see docs/gpu.md)
# usage: scripts/gpu_wheels.sh [PYTHON_VERSION=3.12] [PART_MB=56]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYV="${1:-3.12}"
PART_MB="${2:-56}"
PIP="${PIP:-$ROOT/.venv/bin/python -m pip}"
ORT_GPU="${ORT_GPU:-onnxruntime-gpu==1.31.1}"
cd "$ROOT"
rm -rf .whl .whl-ort && mkdir -p .whl .whl-ort
download() {
  # shellcheck disable=SC2086
  $PIP download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any -d "$@"
}
# Runtime dependencies of the server (pyproject) missing from, or older in, that image.
download .whl "grpcio==1.85.1" "grpcio-reflection==1.85.1" "grpcio-health-checking==1.85.1" \
  "protobuf>=7.35,<8" "opentelemetry-api>=1.45,<2" "opentelemetry-sdk>=1.45,<2" \
  "opentelemetry-semantic-conventions" "opentelemetry-exporter-otlp>=1.45,<2" \
  "opentelemetry-exporter-otlp-proto-grpc>=1.45,<2" "opentelemetry-exporter-otlp-proto-http>=1.45,<2" \
  "opentelemetry-exporter-otlp-proto-common>=1.45,<2" "opentelemetry-proto>=1.45,<2" \
  "googleapis-common-protos" "importlib-metadata" "pytest-asyncio>=1.0" "orjson>=3.10"
download .whl-ort "$ORT_GPU"
wheel="$(ls .whl-ort/*.whl)"
sha256sum "$wheel" | awk '{print $1}' > .whl-ort/SHA256
basename "$wheel" > .whl-ort/NAME
split -b "${PART_MB}m" -d -a 1 "$wheel" .whl-ort/part.
rm "$wheel"
du -sh .whl; ls -l .whl-ort
