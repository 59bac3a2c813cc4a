#!/usr/bin/env bash
# The targets that need >= 8 cores (issues 13 and 25), in one run: scaling-bench --frontends
# 8 vs 1 with instances in threads, in worker processes (SERVICE_INSTANCE_WORKERS=1, decision
# 030) and with the engine's switch interval at 0.2 ms (SERVICE_ENGINE_SWITCH_INTERVAL_US);
# batching's ratio (b) (MLP 3 x 4096, c=64) split into 8 frontends, with workers, and in one
# process. Each step is bounded by `timeout`, so a hung step still leaves the others'
# reports. MANY_STEPS picks steps; by default the first four, in the order of what they
# decide (about 2-2.5 min each on 2 cores): the scaling target, workers or threads
# (decision 030), the switch interval; `batching batching_one` add ratio (b) with threads
# and in one process.
#
#     loadtest/many_cores.sh [OUT_DIR]        # PYTHON (default .venv/bin/python), h2load on PATH
#     MANY_STEPS="scaling scaling_workers" loadtest/many_cores.sh OUT_DIR
set -uo pipefail
PY=${PYTHON:-.venv/bin/python}
OUT_DIR=${1:-loadtest/results/cores}
FRONTENDS=${MANY_FRONTENDS:-8}
STEPS=${MANY_STEPS:-scaling scaling_workers batching_workers scaling_switch}
mkdir -p "$OUT_DIR"
echo "== $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

scaling() {  # NAME, then VAR=VALUE settings for the server
    local name=$1
    shift
    echo "== scaling-bench --frontends 1 vs $FRONTENDS ($name${*:+: $*})"
    env "$@" timeout "${SCALING_TIMEOUT:-300}" "$PY" -m loadtest scaling-bench \
        --modes 1 "$FRONTENDS" --rounds 2 --duration 5 --connections 32 --client-threads 4 \
        --out "$OUT_DIR/$name.md"
    echo "scaling-bench ($name) exit $?"
}

batching() {  # NAME FRONTENDS, then VAR=VALUE settings for the server
    local name=$1 mode=$2
    shift 2
    echo "== batching --quick --width 4096 --processes 4, SERVICE_FRONTENDS=$mode${*:+ $*}"
    env SERVICE_FRONTENDS="$mode" "$@" timeout "${RUN_ALL_TIMEOUT:-150}" "$PY" -m loadtest \
        batching --quick --width 4096 --processes 4 --out-dir "$OUT_DIR/$name"
    echo "batching ($name) exit $?"
}

for step in $STEPS; do
    case $step in
        scaling) scaling scaling ;;
        scaling_workers) scaling scaling_workers SERVICE_INSTANCE_WORKERS=1 ;;
        scaling_switch) scaling scaling_switch SERVICE_ENGINE_SWITCH_INTERVAL_US=200 ;;
        batching) batching "mlp4096_f$FRONTENDS" "$FRONTENDS" ;;
        batching_workers) batching "mlp4096_f${FRONTENDS}_workers" "$FRONTENDS" \
            SERVICE_INSTANCE_WORKERS=1 ;;
        batching_one) batching mlp4096_f0 0 ;;
        *) echo "unknown step '$step'" >&2 ;;
    esac
done
