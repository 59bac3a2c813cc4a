#!/usr/bin/env bash
# Bootstrap the server environment, then serve a model repository: the gRPC service (port
# 8001, metrics on 8002) and the REST gateway in front of it (port 8000), as Triton.
# Extra arguments go to the service, e.g. scripts/serve.sh --grpc-port 9001 --log-verbose 1;
# with --model-repository DIR (repeatable) it serves DIR, else the embedded default one.
# Gateway settings: GATEWAY_HTTP_PORT (default 8000), GATEWAY_ARGS (more gateway flags),
# SERVE_GATEWAY=0 to run the service alone. Ctrl-C / SIGTERM stops both; either one failing
# to start (a busy port) stops the other, and the script exits with the failure's code (1).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/bootstrap.sh" server
cd "$ROOT"

# The embedded repository only when the caller names none.
repository=(--model-repository service/default_repository)
for arg in "$@"; do
  case "$arg" in
    --model-repository|--model-repository=*|--model-store|--model-store=*) repository=() ;;
  esac
done

if [ "${SERVE_GATEWAY:-1}" = "0" ]; then
  exec .venv/bin/python -m service "${repository[@]}" "$@"
fi

# The gateway must know the service's port: take the last --grpc-port given (default 8001).
# Its unary calls go through the service's local socket (--grpc-local-socket, one per user
# and port unless given): a gRPC hop between two Python processes costs more than the REST
# request it carries (docs/decisions/016-local-rpc-socket.md).
grpc_port=8001
local_socket=""
prev=""
for arg in "$@"; do
  case "$arg" in
    --grpc-port=*) grpc_port="${arg#--grpc-port=}" ;;
    --grpc-local-socket=*) local_socket="${arg#--grpc-local-socket=}" ;;
    *)
      [ "$prev" = "--grpc-port" ] && grpc_port="$arg"
      [ "$prev" = "--grpc-local-socket" ] && local_socket="$arg"
      ;;
  esac
  prev="$arg"
done
if [ "$grpc_port" = "0" ]; then
  echo "serve.sh: --grpc-port 0 is not supported here (the gateway needs a fixed port)" >&2
  exit 2
fi

.venv/bin/python -m service "${repository[@]}" "$@" &
service_pid=$!
# shellcheck disable=SC2086  # GATEWAY_ARGS is a list of flags
.venv/bin/python -m gateway --grpc-target "127.0.0.1:$grpc_port" \
  --http-port "${GATEWAY_HTTP_PORT:-8000}" ${GATEWAY_ARGS:-} &
gateway_pid=$!

stop() { kill -TERM "$service_pid" "$gateway_pid" 2>/dev/null || true; }
trap stop INT TERM

# When either process ends, stop the other and exit with the status of the one that ended
# (a busy port: its 1, not the other's 143 from being stopped mid-start). On a signal to
# this script both are stopped: the first non-zero exit status of the two, or 0.
ended_code=0
wait -n "$service_pid" "$gateway_pid" || ended_code=$?
running=0
for pid in "$service_pid" "$gateway_pid"; do
  if kill -0 "$pid" 2>/dev/null; then running=$((running + 1)); fi
done
stop
status=0
for pid in "$service_pid" "$gateway_pid"; do
  code=0
  wait "$pid" 2>/dev/null || code=$?
  [ "$status" = "0" ] && status="$code"
done
if [ "$running" = "1" ]; then status="$ended_code"; fi
exit "$status"
