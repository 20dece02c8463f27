#!/usr/bin/env bash
# Start Arbiter on embedded defaults (SQLite in a temporary directory, in-process cache)
# on a free loopback port, wait until it is ready, run `python -m evidence.bench` against it, and
# stop it again, whatever happens. Arguments are passed on to evidence.bench, e.g.
#   bash scripts/serve_and_bench.sh --profiles fifo,tiresias --duration-s 10
# Environment: VENV (default .venv) picks the interpreter;
# READY_TIMEOUT_S (default 60) bounds the wait for GET /readyz.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv_bin="${VENV:-.venv}/bin"
if [[ -x "$venv_bin/python" ]]; then
  python="$venv_bin/python"
else
  python="$(command -v python3)"
fi
ready_timeout_s="${READY_TIMEOUT_S:-60}"

workdir="$(mktemp -d "${TMPDIR:-/tmp}/arbiter-bench.XXXXXX")"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port="$("$python" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()')"
base_url="http://127.0.0.1:$port"

# Embedded defaults only: a throwaway SQLite file (the service migrates it at start), no
# Redis, and the decision log's spill directory beside the database.
export ARBITER_DATABASE_URL="sqlite:///$workdir/arbiter.db"
export ARBITER_SPILL_DIR="$workdir/spill"
unset ARBITER_REDIS_URL

# `python -m app.cli` is the `arbiter` console script run from this checkout, so the
# benchmark measures the code here even when the installed entry point is stale.
"$python" -m app.cli serve --host 127.0.0.1 --port "$port" --log-level warning \
  >"$workdir/server.log" 2>&1 &
server_pid=$!

deadline=$((SECONDS + ready_timeout_s))
until "$python" -c 'import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1] + "/readyz", timeout=2) as response:
        sys.exit(0 if response.status == 200 else 1)
except OSError:
    sys.exit(1)' "$base_url"; do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "arbiter serve exited before it was ready:" >&2
    cat "$workdir/server.log" >&2
    exit 1
  fi
  if ((SECONDS >= deadline)); then
    echo "arbiter serve was not ready within ${ready_timeout_s}s:" >&2
    tail -n 50 "$workdir/server.log" >&2
    exit 1
  fi
  sleep 0.5
done

echo "benchmarking $base_url (server log: kept until the end of this run)" >&2
status=0
"$python" -m evidence.bench --url "$base_url" "$@" || status=$?
if ((status != 0)); then
  echo "evidence.bench exited with $status; last lines of the server log:" >&2
  tail -n 30 "$workdir/server.log" >&2
fi
exit "$status"
