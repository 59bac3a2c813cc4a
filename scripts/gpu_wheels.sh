#!/usr/bin/env bash
# Collect, on a machine with package-registry access, what a GPU machine without network
# needs to run scripts/gpu_check.sh with that machine's own Python (the one that holds
# PyTorch, the CUDA 13 libraries, numpy, onnx, pytest, nvidia-ml-py, cuda-python):
#   .whl/server/  the server's runtime dependencies that image lacks or has in other versions
#   .whl/client/  tritonclient and its protobuf 6 (the server needs protobuf 7: two targets)
#   .whl/debs/    h2load (Debian's nghttp2-client) and the libraries it needs beyond a
#                 Python image's, for loadtest/many_cores.sh there (apt-get download)
#   .whl-ort/     onnxruntime-gpu with only the device code of the GPU architectures asked for,
#                 xz-compressed and cut into parts (scripts/gpu_bundle.py says why and how)
#   .pa/          perf_analyzer with libcudart.so.12 and libb64 beside it, where one is
#                 installed here (PERF_ANALYZER, default ~/perf-analyzer/bin/perf_analyzer)
# usage: scripts/gpu_wheels.sh [PYTHON_VERSION=3.12] [PART_MB=57] [SM=90]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYV="${1:-3.12}"
PART_MB="${2:-57}"
SM="${3:-90}"
PY="${PY:-$ROOT/.venv/bin/python}"
ORT_GPU="${ORT_GPU:-onnxruntime-gpu==1.31.1}"
cd "$ROOT"
rm -rf .whl .whl-ort && mkdir -p .whl/server .whl/client .whl/debs .whl-ort
download() {
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version "$PYV" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any -d "$@" \
    2> >(grep -v '^WARNING: Location' >&2)
}
# Every runtime dependency of pyproject.toml but numpy (the image's own; torch needs it) and
# onnxruntime (.whl-ort), with the packages they pull in (tests/unit/test_gpu_check.py).
download .whl/server "grpcio==1.85.1" "grpcio-reflection==1.85.1" "grpcio-health-checking==1.85.1" \
  "protobuf>=7.35,<8" "ml-dtypes>=0.5" "opentelemetry-api>=1.45,<2" "opentelemetry-sdk>=1.45,<2" \
  "opentelemetry-semantic-conventions" "opentelemetry-exporter-otlp>=1.45,<2" \
  "opentelemetry-exporter-otlp-proto-grpc>=1.45,<2" "opentelemetry-exporter-otlp-proto-http>=1.45,<2" \
  "opentelemetry-exporter-otlp-proto-common>=1.45,<2" "opentelemetry-proto>=1.45,<2" \
  "googleapis-common-protos" "importlib-metadata" "pytest-asyncio>=1.0" "orjson>=3.10" \
  "httptools>=0.6.4" "opentelemetry-exporter-http-transport" "opentelemetry-exporter-otlp-common"
download .whl/client "tritonclient[grpc]==2.73.0" "protobuf>=6.31,<7" "python-rapidjson" \
  "grpcio==1.85.1" "pytest-asyncio>=1.0"
(cd .whl/debs && apt-get download -q nghttp2-client libnghttp2-14 libev4 libjemalloc2) ||
  echo "gpu_wheels.sh: no h2load packages (apt-get download failed): many_cores will skip"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
download "$tmp" "$ORT_GPU"
"$PY" scripts/gpu_bundle.py pack "$tmp"/*.whl .whl-ort --sm "$SM" --part-mb "$PART_MB"
# perf_analyzer for the benchmarks' c=1 p50 (PERF_ANALYZER there, docs/gpu.md): the binary,
# the CUDA runtime of the environment it was installed into, and Debian's libb64.
pa="${PERF_ANALYZER:-$HOME/perf-analyzer/bin/perf_analyzer}"
rm -rf .pa
if [ -x "$pa" ]; then
  mkdir -p .pa && cp "$pa" .pa/
  cudart=$(find "$(dirname "$pa")/.." -name 'libcudart.so.12' 2>/dev/null | head -1)
  b64=$(ldconfig -p | awk '/libb64.so.0d/ { print $NF; exit }')
  for lib in "$cudart" "$b64"; do
    if [ -n "$lib" ]; then cp -L "$lib" .pa/; fi
  done
  du -sh .pa
else
  echo "gpu_wheels.sh: no perf_analyzer at $pa: the benchmarks' c=1 figure will be the Python client's"
fi
du -sh .whl/server .whl/client .whl/debs; ls -l .whl-ort
