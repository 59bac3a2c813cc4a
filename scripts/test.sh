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
echo "== client-side tests";   .venv-client/bin/python -m pytest -q tests/compat tests/integration tests/gateway
# The integration suite (and the gateway's shared-memory tests: one registry behind REST
# and gRPC) again with every server split into an engine and 2 frontends. The PyTorch and
# OpenVINO modules run once: each already serves its models split (--frontends 2, instance
# workers) in a test of its own, and a second full pass of them cost CI about a minute.
# The PyTorch 2 python runtime's models run in python workers in either layout (~30 s).
# Modules whose every server names its own layout (or is started by serve.sh) would run
# the same servers twice: they run once (about 1.5 minutes of CI).
echo "== client-side tests, --frontends 2"
SERVICE_FRONTENDS=2 .venv-client/bin/python -m pytest -q -p no:cacheprovider tests/integration \
    tests/gateway/test_gateway_shared_memory.py \
    --ignore tests/integration/test_pytorch_backend.py \
    --ignore tests/integration/test_pytorch_python_runtime.py \
    --ignore tests/integration/test_openvino_backend.py \
    --ignore tests/integration/test_serve_script.py \
    --ignore tests/integration/test_layout_statistics.py \
    --ignore tests/integration/test_isolated_instances.py \
    --ignore tests/integration/test_frontends.py \
    --ignore tests/integration/test_cancel_storm_tables.py \
    --ignore tests/integration/test_stop_goaway.py
