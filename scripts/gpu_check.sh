#!/usr/bin/env bash
# Everything of the GPU path, proven on a GPU machine in one command (docs/gpu.md, "The GPU
# check"). Run from the repository root on a machine with an NVIDIA GPU and a Python that has
# PyTorch, numpy, onnx, pytest, nvidia-ml-py and cuda-python (the lent machine's image), with
# the packages of scripts/gpu_wheels.sh beside it:
#
#   scripts/gpu_check.sh --out DIR [--bundle DIR] [--wheels DIR] [--bench quick|standard|full|none]
#                        [--many-cores] [--site DIR] [--steps a,b,...]
#
#   --bundle   the parts of the pruned onnxruntime-gpu (default .whl-ort; none: use what is installed)
#   --wheels   .whl/server and .whl/client wheels (default .whl; missing: use what is installed)
#   --bench    gpu-bench's size (python -m loadtest gpu-bench) (default standard: c = 1, 8, 64, 128; 5 s windows)
#   --many-cores  then loadtest/many_cores.sh (h2load: from --wheels DIR/debs, else PATH)
#   --steps    run only these steps (setup always runs), e.g. --steps bench to measure again
#   BENCH_FRONTENDS=N  the bench server's --frontends (default: one per core, serve.sh's layout)
#   BENCH_ARGS="..."   more arguments for gpu-bench (--cuda-graphs, --width 1024, ...)
#   PERF_ANALYZER=PATH perf_analyzer for the benchmarks' c=1 p50 (libcudart.so.12 beside it or
#                      in its environment; docs/gpu.md)
#
# Steps, each bounded by `timeout`, each logged to DIR/<step>.log:
#   setup       unpack onnxruntime-gpu, install the wheels into two targets (the server needs
#               protobuf 7, tritonclient protobuf 6), a wrapper that runs the server's Python
#   ort_cuda    KIND_GPU ONNX model served over gRPC on CUDA, IO binding and pinned buffers;
#               CUDA graphs; KIND_AUTO placement; a model whose CUDA cannot start refused
#   tensorrt    the TensorRT provider, or "skipped: <reason>"
#   python_gpu  a Python model computing with PyTorch on the GPU (from_dlpack), CUDA shared memory
#   nvml        nv_gpu_* metrics: memory grows with a loaded model, utilization > 0 under load
#   bench       python -m loadtest gpu-bench in the default layout (one frontend per core)
#   bench_workers  the same at c = 64, 128 with the instances in worker processes
#               (SERVICE_INSTANCE_WORKERS=1, decision 030): the engine issue's GPU yardstick
#   realistic   gpu-bench on ResNet-50 (FP32, FP16) and BERT-base shaped models, random weights
#   realistic_graphs  the ResNet-50s again with CUDA graphs, one per batch size: a replayed graph
#               skips the cuDNN plan onnxruntime's Conv rebuilds whenever the batch size changes
#   many_cores  loadtest/many_cores.sh, only with --many-cores
# The summary table (step, result, figure) is printed last and kept in DIR/summary.md; the exit
# status is 0 when no step failed (a step skipped for a reason it names does not fail the run).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="" BUNDLE=.whl-ort WHEELS=.whl BENCH=standard MANY=0 SITE=/tmp/gpu-check STEPS=all
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --bundle) BUNDLE="$2"; shift 2 ;;
    --wheels) WHEELS="$2"; shift 2 ;;
    --bench) BENCH="$2"; shift 2 ;;
    --site) SITE="$2"; shift 2 ;;
    --many-cores) MANY=1; shift ;;
    --steps) STEPS="$2"; shift 2 ;;
    *) echo "gpu_check: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "$OUT" ] || { echo "gpu_check: --out DIR is required" >&2; exit 2; }
mkdir -p "$OUT" "$SITE"
OUT="$(cd "$OUT" && pwd)"
PY="${PYTHON:-python3}"
SERVER_PY="$SITE/server-python"
export GPU_CHECK_FIGURES="$OUT/figures.tsv" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
: > "$GPU_CHECK_FIGURES"
: > "$OUT/summary.tsv"
export SERVICE_FRONTENDS="${SERVICE_FRONTENDS:-2}"  # test servers: the engine / frontends split


joined() { awk 'NR > 1 { printf "; " } { printf "%s", $0 }' | cut -c1-1000; }

# step NAME TIMEOUT FUNCTION: run the function in its own shell under `timeout`, log it, and
# note "NAME<TAB>result<TAB>figure" in summary.tsv. The result: passed / failed (exit N) /
# timed out after Ns / skipped: <the step's own "SKIP: " line, or pytest's reason>. The
# figure: what the step's tests recorded (tests/gpu_support.py's record) or the step's own
# "FIGURE: " lines.
step() {
  local name="$1" limit="$2" fn="$3" from rc result figure
  if [ "$STEPS" != all ] && [ "$name" != setup ] && [[ ",$STEPS," != *",$name,"* ]]; then
    return 0
  fi
  from=$(wc -l < "$GPU_CHECK_FIGURES")
  echo "== $name (at most ${limit}s)"
  timeout --kill-after=10 "$limit" bash -c "$fn" > >(tee "$OUT/$name.log") 2>&1
  rc=$?
  sleep 0.2  # let tee finish the log
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    result="timed out after ${limit}s"
  elif [ $rc -ne 0 ]; then
    result="failed (exit $rc)"
  elif grep -q '^SKIP: ' "$OUT/$name.log"; then
    result="skipped: $(grep -m1 '^SKIP: ' "$OUT/$name.log" | sed 's/^SKIP: //')"
  elif grep -Eq '^[0-9]+ skipped' "$OUT/$name.log" && ! grep -Eq '[0-9]+ passed' "$OUT/$name.log"; then
    result="skipped: $(grep -m1 '^SKIPPED' "$OUT/$name.log" | sed -E 's/^SKIPPED \[[0-9]+\] [^:]+:[0-9]+: //')"
  else
    result="passed"
  fi
  figure=$(tail -n +"$((from + 1))" "$GPU_CHECK_FIGURES" | cut -f2 | joined)
  [ -n "$figure" ] || figure=$(grep -h '^FIGURE: ' "$OUT/$name.log" | sed 's/^FIGURE: //' | joined)
  printf '%s\t%s\t%s\n' "$name" "$result" "$figure" >> "$OUT/summary.tsv"
  echo "== $name: $result"
}
server_tests() { "$SERVER_PY" -m pytest -q -rs -p no:cacheprovider "$@"; }
client_tests() { PYTHONPATH="$SITE/client${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -q -rs -p no:cacheprovider "$@"; }
both() {  # both CLIENT_K SERVER_ARGS...: the client-side tests, then the server-side ones
  local k="$1" a b
  shift
  GPU_TESTS=required client_tests tests/integration/test_gpu_serving.py -k "$k"; a=$?
  GPU_TESTS=required server_tests "$@"; b=$?
  return $((a || b))
}

setup() {
  set -e
  nvidia-smi -L
  if ls "$BUNDLE"/part.* >/dev/null 2>&1; then
    rm -rf "$SITE/ort" && "$PY" scripts/gpu_bundle.py unpack "$BUNDLE" "$SITE/ort"
  fi
  for env in server client; do
    if ls "$WHEELS/$env"/*.whl >/dev/null 2>&1; then
      "$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-index --no-deps --no-compile \
        --upgrade --target "$SITE/$env" "$WHEELS/$env"/*.whl
    fi
  done
  # h2load for many_cores, from Debian's packages (the image has none): unpacked, not
  # installed, and run through a wrapper that finds its libraries.
  if ls "$WHEELS"/debs/*.deb >/dev/null 2>&1; then
    for deb in "$WHEELS"/debs/*.deb; do dpkg -x "$deb" "$SITE/root"; done
    mkdir -p "$SITE/bin"
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
      "$SITE/root/usr/lib/x86_64-linux-gnu" "$SITE/root/usr/bin/h2load" > "$SITE/bin/h2load"
    chmod +x "$SITE/bin/h2load"
    "$SITE/bin/h2load" --version | head -1
  fi
  {
    echo '#!/bin/sh'
    echo '# The server: onnxruntime-gpu and the server wheels first, then the image packages.'
    bash scripts/gpu_env.sh "$PY" 2>/dev/null || true
    echo "export PYTHONPATH='$SITE/ort:$SITE/server:$ROOT:$ROOT/protos'\${PYTHONPATH:+:\$PYTHONPATH}"
    echo "exec '$PY' \"\$@\""
  } > "$SERVER_PY"
  chmod +x "$SERVER_PY"
  cat "$SERVER_PY"
  "$SERVER_PY" - <<'PYEOF'
import sys

import google.protobuf
import grpc
import ml_dtypes
import numpy
import onnxruntime as ort

from service.gpus import inventory

print("FIGURE: python", sys.version.split()[0], "| onnxruntime", ort.__version__,
      ort.get_available_providers(), "| grpcio", grpc.__version__, "| protobuf",
      google.protobuf.__version__, "| numpy", numpy.__version__, "| ml_dtypes",
      ml_dtypes.__version__)
gpus = inventory().gpus()
assert gpus, "NVML finds no GPU"
print("FIGURE:", ", ".join(f"{g.name} (compute capability {g.capability})" for g in gpus))
PYEOF
  PYTHONPATH="$SITE/client${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c 'import google.protobuf as p, tritonclient.grpc; print("client: tritonclient, protobuf", p.__version__)'
  # Does onnxruntime.preload_dlls() alone find the CUDA libraries (no LD_LIBRARY_PATH)?
  env -u LD_LIBRARY_PATH PYTHONPATH="$SITE/ort" "$PY" - <<'PYEOF' || echo "FIGURE: preload_dlls alone: CUDA did not start"
import onnxruntime as ort
from onnx import TensorProto, helper

graph = helper.make_graph(
    [helper.make_node("Relu", ["x"], ["y"])], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
ort.preload_dlls()
session = ort.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
assert session.get_providers()[0] == "CUDAExecutionProvider", session.get_providers()
print("FIGURE: preload_dlls alone: CUDA session starts")
PYEOF
}
ort_cuda() { both "onnx_model or cannot_start" tests/unit/test_gpu.py -k "io_binding or cuda_graphs or auto_kind"; }
tensorrt() { server_tests tests/unit/test_gpu.py -k tensorrt; }
python_gpu() { both "python_model" tests/unit/test_gpu.py -k "dlpack or python_model"; }
nvml() { both "nvml" tests/unit/test_gpu.py tests/unit/test_metrics_gpu.py -k "nvml or real"; }
gpu_bench() {  # gpu_bench DIR LABEL CONCURRENCY...: gpu-bench at $BENCH's size into $OUT/DIR
  local dir="$1" label="$2" args
  shift 2
  args=(--concurrency "$@" --duration 5 --warmup 2 --ceiling-s 1)
  case "$BENCH" in quick) args=(--quick) ;; full) args=() ;; esac
  # The server in its default layout (one frontend per core), as scripts/serve.sh starts it.
  # shellcheck disable=SC2086  # BENCH_ARGS: words
  if [ -n "${PERF_ANALYZER:-}" ] && [ -x "$PERF_ANALYZER" ]; then
    args+=(--perf-analyzer "$PERF_ANALYZER")
  fi
  SERVICE_FRONTENDS=${BENCH_FRONTENDS:-$(nproc)} "$SERVER_PY" -m loadtest gpu-bench "${args[@]}" \
    ${BENCH_ARGS:-} ${MODELS_ARGS:-} --out-dir "$OUT/$dir" || return $?
  # --quick writes into quick/
  grep -hE '^- [a-z0-9_]+ at c=' "$OUT/$dir/report.md" "$OUT/$dir/quick/report.md" 2>/dev/null |
    sed "s/^- /FIGURE: $label/"
}
bench() { SERVICE_INSTANCE_WORKERS=0 gpu_bench gpu_bench "" 1 8 64 128; }
bench_workers() {
  if [ "${BENCH_FRONTENDS:-1}" = 0 ]; then
    echo "SKIP: instance workers need the split layout (BENCH_FRONTENDS > 0)"; return 0
  fi
  SERVICE_INSTANCE_WORKERS=1 gpu_bench gpu_bench_workers "instances in workers: " 64 128
}
realistic() {
  MODELS_ARGS="--models resnet50 resnet50_fp16 bert" SERVICE_INSTANCE_WORKERS=0 \
    gpu_bench gpu_bench_realistic "" 1 8 64 128
}
realistic_graphs() {
  MODELS_ARGS="--models resnet50 resnet50_fp16 --cuda-graphs" SERVICE_INSTANCE_WORKERS=0 \
    gpu_bench gpu_bench_graphs "CUDA graphs: " 8 64
}
many_cores() { PYTHON="$SERVER_PY" loadtest/many_cores.sh "$OUT/cores"; }

export PATH="$SITE/bin:$PATH"  # h2load, once the setup unpacked it
export OUT SITE PY SERVER_PY BUNDLE WHEELS BENCH ROOT SERVICE_PYTHON="$SERVER_PY"
export -f server_tests client_tests both setup ort_cuda tensorrt python_gpu nvml gpu_bench bench \
  bench_workers realistic realistic_graphs many_cores

step setup 180 setup
if ! grep -q $'^setup\tpassed' "$OUT/summary.tsv"; then
  echo "gpu_check: setup failed; the other steps need it" >&2
else
  step ort_cuda 240 ort_cuda
  step tensorrt 120 tensorrt
  step python_gpu 240 python_gpu
  step nvml 180 nvml
  if [ "$BENCH" = none ] && [ "$STEPS" = all ]; then
    printf 'bench\tskipped: --bench none\t\n' >> "$OUT/summary.tsv"
    printf 'bench_workers\tskipped: --bench none\t\n' >> "$OUT/summary.tsv"
    printf 'realistic\tskipped: --bench none\t\n' >> "$OUT/summary.tsv"
    printf 'realistic_graphs\tskipped: --bench none\t\n' >> "$OUT/summary.tsv"
  else
    step bench 420 bench
    step bench_workers 300 bench_workers
    step realistic 420 realistic
    step realistic_graphs 240 realistic_graphs
  fi
  if [ "$MANY" = 1 ]; then
    if command -v h2load >/dev/null; then
      step many_cores 540 many_cores
    else
      printf 'many_cores\tskipped: h2load is not on PATH\t\n' >> "$OUT/summary.tsv"
    fi
  fi
fi

{
  echo "# GPU check: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo
  echo "Command: \`scripts/gpu_check.sh --out DIR --bench $BENCH --steps $STEPS\`, bench frontends ${BENCH_FRONTENDS:-$(nproc)}, at ${GPU_CHECK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")}, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores"
  echo
  echo "| step | result | figure |"
  echo "|---|---|---|"
  while IFS=$'\t' read -r name result figure; do
    echo "| $name | $result | ${figure//|/\\|} |"
  done < "$OUT/summary.tsv"
} > "$OUT/summary.md"
echo
cat "$OUT/summary.md"
! cut -f2 "$OUT/summary.tsv" | grep -Eq '^(failed|timed out)'
