#!/usr/bin/env bash
# Bootstrap every environment, then run every check and test. CI runs exactly this.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/bootstrap.sh" test
cd "$ROOT"
export SERVICE_PYTHON="$ROOT/.venv/bin/python"
# bootstrap installed the framework extras: their tests must run, not skip (decision 046).
export FRAMEWORK_TESTS=required

echo "== buf lint";            npx --no-install buf lint
echo "== generated code";      .venv/bin/python scripts/gen_protos.py --check
echo "== ruff";                .venv/bin/ruff check . && .venv/bin/ruff format --check .
echo "== mypy";                .venv/bin/mypy service gateway
echo "== server-side tests";   .venv/bin/python -m pytest -q tests/unit
# The two client-side passes run side by side: each mostly waits for the servers it
# starts (one pass used about 0.4-0.75 of a core on a 2-core machine, 15 minutes at a
# load average of 10), so together they take little longer than one. The second one's
# output is printed once both are done; either failing fails the run.
# The second pass: the integration suite (and the gateway's shared-memory tests: one
# registry behind REST and gRPC) again with every server split into an engine and 2
# frontends. The PyTorch and OpenVINO modules run once: each already serves its models
# split (--frontends 2, instance workers) in a test of its own, and a second full pass of
# them cost CI about a minute. The PyTorch 2 python runtime's models run in python
# workers in either layout (~30 s). Modules whose every server names its own layout (or
# is started by serve.sh) would run the same servers twice: they run once (about 1.5
# minutes of CI).
split_log="$(mktemp)"
split_tmp="$(mktemp -d)"
SERVICE_FRONTENDS=2 .venv-client/bin/python -m pytest -q -p no:cacheprovider \
    --basetemp "$split_tmp/pytest" tests/integration \
    tests/gateway/test_gateway_shared_memory.py \
    --ignore tests/integration/test_pytorch_backend.py \
    --ignore tests/integration/test_pytorch_python_runtime.py \
    --ignore tests/integration/test_openvino_backend.py \
    --ignore tests/integration/test_serve_script.py \
    --ignore tests/integration/test_layout_statistics.py \
    --ignore tests/integration/test_isolated_instances.py \
    --ignore tests/integration/test_frontends.py \
    --ignore tests/integration/test_cancel_storm_tables.py \
    --ignore tests/integration/test_stop_goaway.py >"$split_log" 2>&1 &
split_pid=$!
echo "== client-side tests (the --frontends 2 pass runs beside them)"
one=0
.venv-client/bin/python -m pytest -q tests/compat tests/integration tests/gateway || one=$?
split=0
wait "$split_pid" || split=$?
echo "== client-side tests, --frontends 2"
cat "$split_log"
rm -rf "$split_log" "$split_tmp"
if [ "$one" -ne 0 ] || [ "$split" -ne 0 ]; then
    echo "client-side tests failed: default layout exit $one, --frontends 2 exit $split"
    exit 1
fi
