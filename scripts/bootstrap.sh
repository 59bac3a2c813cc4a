#!/usr/bin/env bash
# Build the environments from nothing, idempotently. Sourced by serve.sh and test.sh.
#   bootstrap.sh server   -> .venv with the server's runtime dependencies
#   bootstrap.sh test     -> .venv with dev extras, .venv-client (tritonclient), buf via npm
# Each step is skipped when the inputs it was built from have not changed (stamp files).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
what="${1:-server}"

"$PYTHON" - <<'PY' || { echo "bootstrap: Python >= 3.11 is required (set PYTHON=...)" >&2; exit 1; }
import sys
sys.exit(0 if sys.version_info >= (3, 11) else 1)
PY

stamp_ok() {  # stamp_ok FILE INPUT...: true when FILE holds the hash of the inputs
  local file="$1"; shift
  [ -f "$file" ] && [ "$(cat "$file")" = "$(cat "$@" | sha256sum | cut -d' ' -f1)" ]
}
stamp_write() {
  local file="$1"; shift
  cat "$@" | sha256sum | cut -d' ' -f1 > "$file"
}
# pip's own exit status counts; only the index-location warnings are filtered out.
# pip's per-package lines stay off; each step says what it does and how long it took.
pip_quiet() { "$@" --disable-pip-version-check -q 2> >(grep -v '^WARNING: Location' >&2); }
step_start() { echo "bootstrap: $1 ..."; step_t0=$SECONDS; }
step_done() { echo "bootstrap:   done in $((SECONDS - step_t0))s"; }

make_venv() {
  if [ ! -x "$1/bin/python" ]; then
    step_start "creating $1"
    "$PYTHON" -m venv "$1"
    step_done
  fi
}

# nginx (Debian's package) for tests/integration/test_replicas.py, which runs three
# replicas behind deploy/nginx/. Installed when missing and this runs as root with apt-get
# (CI and the project's machines); anywhere else those tests skip, saying why.
have_nginx() { command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; }
install_nginx() {
  # Debian starts a packaged service at install unless policy-rc.d forbids it, and
  # nginx's default site would listen on port 80 of every interface: forbid it meanwhile.
  local policy=/usr/sbin/policy-rc.d added="" rc=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && added=1
  fi
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nginx)
  "${apt[@]}" >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && "${apt[@]}" >/dev/null 2>&1; } || rc=$?
  [ -z "$added" ] || rm -f "$policy"
  return "$rc"
}

make_venv .venv
if [ "$what" = "test" ]; then
  # The framework backends' extras too (torch: its CPU build, tests/requirements-frameworks.txt),
  # so that their tests run rather than skip (FRAMEWORK_TESTS=required in test.sh).
  if ! stamp_ok .venv/.stamp-dev pyproject.toml tests/requirements-frameworks.txt; then
    step_start "installing server + dev + framework dependencies into .venv (about two minutes)"
    pip_quiet .venv/bin/python -m pip install -e ".[dev,torch,openvino,tensorflow]" -r tests/requirements-frameworks.txt
    .venv/bin/python -c "import grpc, onnxruntime, pytest, mypy, torch, openvino, tensorflow" || exit 1
    step_done
    stamp_write .venv/.stamp-dev pyproject.toml tests/requirements-frameworks.txt
    stamp_write .venv/.stamp-server pyproject.toml
  fi
  make_venv .venv-client
  if ! stamp_ok .venv-client/.stamp tests/requirements-client.txt; then
    step_start "installing the test client environment into .venv-client"
    pip_quiet .venv-client/bin/python -m pip install -r tests/requirements-client.txt
    .venv-client/bin/python -c "import tritonclient.grpc, pytest" || exit 1
    step_done
    stamp_write .venv-client/.stamp tests/requirements-client.txt
  fi
  if ! have_nginx && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing nginx (Debian package) for the replica tests"
    install_nginx || echo "bootstrap: nginx did not install; the replica tests will skip" >&2
  fi
  if ! stamp_ok node_modules/.stamp package-lock.json; then
    command -v npm >/dev/null || { echo "bootstrap: npm is required for buf" >&2; exit 1; }
    step_start "installing buf (npm ci)"
    npm ci --no-audit --no-fund --loglevel=error
    step_done
    stamp_write node_modules/.stamp package-lock.json
  fi
else
  if ! stamp_ok .venv/.stamp-server pyproject.toml; then
    step_start "installing the server into .venv (about a minute, once)"
    pip_quiet .venv/bin/python -m pip install -e .
    .venv/bin/python -c "import grpc, onnxruntime" || exit 1
    step_done
    stamp_write .venv/.stamp-server pyproject.toml
  fi
fi
