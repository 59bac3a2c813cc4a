#!/usr/bin/env bash
# Issue 13's targets that need >= 8 cores, in one run: scaling-bench --frontends 8 vs 1, and
# batching's ratio (b) (MLP 3 x 4096, c=64) split into 8 frontends and in one process. Each
# step is bounded by `timeout`, so a hung step still leaves the others' reports.
#
#     loadtest/many_cores.sh [OUT_DIR]        # PYTHON (default .venv/bin/python), h2load on PATH
set -uo pipefail
PY=${PYTHON:-.venv/bin/python}
OUT_DIR=${1:-loadtest/results/cores}
FRONTENDS=${MANY_FRONTENDS:-8}
mkdir -p "$OUT_DIR"
echo "== $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== scaling-bench: --frontends 1 vs $FRONTENDS"
timeout "${SCALING_TIMEOUT:-300}" "$PY" -m loadtest scaling-bench --modes 1 "$FRONTENDS" \
    --rounds 2 --duration 5 --connections 32 --client-threads 4 --out "$OUT_DIR/scaling.md"
echo "scaling-bench exit $?"
for mode in "$FRONTENDS" 0; do
    echo "== batching --quick --width 4096 --processes 4, SERVICE_FRONTENDS=$mode"
    SERVICE_FRONTENDS=$mode timeout "${RUN_ALL_TIMEOUT:-150}" "$PY" -m loadtest batching \
        --quick --width 4096 --processes 4 --out-dir "$OUT_DIR/mlp4096_f$mode"
    echo "batching (SERVICE_FRONTENDS=$mode) exit $?"
done
