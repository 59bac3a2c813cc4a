#!/usr/bin/env bash
# Bootstrap the server environment, then serve a model repository: the gRPC service (port
# 8001, metrics on 8002) and the REST gateway in front of it (port 8000), as Triton.
# Extra arguments go to the service, e.g. scripts/serve.sh --grpc-port 9001 --log-verbose 1;
# with --model-repository DIR (repeatable) it serves DIR, else the embedded default one.
# Gateway settings: GATEWAY_HTTP_PORT (default 8000), GATEWAY_ARGS (more gateway flags),
# SERVE_GATEWAY=0 to run the service alone. Ctrl-C / SIGTERM / SIGHUP stops both; either one
# failing to start (a busy port) stops the other, and the script exits with the failure's
# code (1); a stop whose exit timeout abandons requests exits 1, as Triton's.
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

# Huge-page malloc in both processes (docs/decisions/045-huge-page-malloc.md): glibc reads
# GLIBC_TUNABLES at start; SERVICE_MALLOC_HUGEPAGES=0 leaves it as it is.
if [ "${SERVICE_MALLOC_HUGEPAGES:-1}" != "0" ] && [[ "${GLIBC_TUNABLES:-}" != *glibc.malloc.hugetlb* ]]; then
  export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1"
fi

if [ "${SERVE_GATEWAY:-1}" = "0" ]; then
  exec .venv/bin/python -m service "${repository[@]}" "$@"
fi

# The gateway must know the service's port: take the last --grpc-port given (default 8001).
# Its unary calls go through the service's local socket (--grpc-local-socket, on both; an
# empty value leaves it out): a gRPC hop between two Python processes costs more than the
# REST request it carries (docs/decisions/016-local-rpc-socket.md).
# Its keepalive pings must not come more often than the service's ping policy lets them
# (--grpc-http2-min-recv-ping-interval-without-data): 10% above the interval given, else
# the gateway's default, which fits Triton's (gateway/config.py).
# The gateway's HTTP stop counts the service's --exit-timeout-secs down, as Triton's HTTP
# endpoint counts its server's: the last one given goes to the gateway too.
grpc_port=8001
local_socket=""
local_given=0
ping_interval=""
ping_flag=--grpc-http2-min-recv-ping-interval-without-data
exit_timeout=""
prev=""
for arg in "$@"; do
  case "$arg" in
    --grpc-port=*) grpc_port="${arg#--grpc-port=}" ;;
    --grpc-local-socket=*) local_socket="${arg#--grpc-local-socket=}" local_given=1 ;;
    "$ping_flag"=*) ping_interval="${arg#"$ping_flag"=}" ;;
    --exit-timeout-secs=*) exit_timeout="${arg#--exit-timeout-secs=}" ;;
    *)
      [ "$prev" = "--grpc-port" ] && grpc_port="$arg"
      [ "$prev" = "--grpc-local-socket" ] && local_socket="$arg" local_given=1
      [ "$prev" = "$ping_flag" ] && ping_interval="$arg"
      [ "$prev" = "--exit-timeout-secs" ] && exit_timeout="$arg"
      ;;
  esac
  prev="$arg"
done
if [ "$grpc_port" = "0" ]; then
  echo "serve.sh: --grpc-port 0 is not supported here (the gateway needs a fixed port)" >&2
  exit 2
fi

# Unless given, the socket is grpc-PORT.sock in a directory only this user may enter
# ($XDG_RUNTIME_DIR/tritonserver, else $TMPDIR/tritonserver-UID): the gateway sends its
# calls to whatever listens at the path, so no one else may be able to put a socket there.
service_args=()
if [ "$local_given" = "0" ]; then
  if [ -n "${XDG_RUNTIME_DIR:-}" ] && [ -d "$XDG_RUNTIME_DIR" ] && [ -O "$XDG_RUNTIME_DIR" ]; then
    runtime_dir="$XDG_RUNTIME_DIR/tritonserver"
  else
    runtime_dir="${TMPDIR:-/tmp}/tritonserver-$(id -u)"
  fi
  mkdir -m 0700 "$runtime_dir" 2>/dev/null || true
  if [ -L "$runtime_dir" ] || [ ! -d "$runtime_dir" ] || [ ! -O "$runtime_dir" ]; then
    echo "serve.sh: '$runtime_dir' is not a directory of this user's;" \
      "give --grpc-local-socket PATH" >&2
    exit 1
  fi
  chmod 0700 "$runtime_dir"
  local_socket="$runtime_dir/grpc-$grpc_port.sock"
  service_args=(--grpc-local-socket "$local_socket")
fi
gateway_args=()
[ -n "$local_socket" ] && gateway_args=(--grpc-local-socket "$local_socket")
if [[ "$ping_interval" =~ ^[0-9]{1,9}$ ]] && [ "$((10#$ping_interval))" -gt 0 ]; then
  gateway_args+=(--grpc-keepalive-ms "$((10#$ping_interval * 11 / 10))")
fi
[ -n "$exit_timeout" ] && gateway_args+=(--exit-timeout-secs "$exit_timeout")

# Each in a session of its own (setsid execs in place: $! is the process), so that a
# terminal's Ctrl-C reaches this script alone, which passes one SIGTERM to each, once: a
# second signal stops the gateway at once (its connections cut off, their requests
# abandoned), which Ctrl-C must not do. Without setsid (util-linux) they share ours.
detach=()
if command -v setsid >/dev/null; then detach=(setsid); fi
"${detach[@]}" .venv/bin/python -m service "${repository[@]}" "${service_args[@]}" "$@" &
service_pid=$!
# shellcheck disable=SC2086  # GATEWAY_ARGS is a list of flags
"${detach[@]}" .venv/bin/python -m gateway --grpc-target "127.0.0.1:$grpc_port" \
  "${gateway_args[@]}" --http-port "${GATEWAY_HTTP_PORT:-8000}" ${GATEWAY_ARGS:-} &
gateway_pid=$!

stopped=0
stop() {
  [ "$stopped" = "1" ] && return 0
  stopped=1
  kill -TERM "$service_pid" "$gateway_pid" 2>/dev/null || true
}
signalled=0
trap 'signalled=1; stop' INT TERM HUP

# When either process ends, stop the other and exit with the status of the one that ended
# (a busy port: its 1, not the other's 143 from being stopped mid-start). On a signal to
# this script both are stopped: the first non-zero exit status of the two, or 0 (a signal
# also ends `wait -n` with 128+n, and one of the two may be gone by the count below). Each
# exits 1 when the exit timeout abandoned requests, as Triton does.
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
if [ "$signalled" = "0" ] && [ "$running" = "1" ]; then status="$ended_code"; fi
exit "$status"
