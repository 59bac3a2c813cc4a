#!/usr/bin/env bash
# Bootstrap the server environment, then serve the embedded default model repository.
# Extra arguments go to the server, e.g. scripts/serve.sh --grpc-port 9001 --log-verbose 1
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/bootstrap.sh" server
cd "$ROOT"
exec .venv/bin/python -m service --model-repository service/default_repository "$@"
