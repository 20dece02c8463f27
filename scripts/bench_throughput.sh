#!/usr/bin/env bash
# Decisions per second on the small example under a real load generator (wrk), with
# one and with two uvicorn workers. Starts the service on embedded defaults (a throwaway
# SQLite file, the in-process cache) on a free loopback port, posts
# {"profile": PROFILE, "snapshot": examples/small.json} from wrk (1 thread, CONNECTIONS
# keep-alive connections) for DURATION seconds per worker count, prints wrk's summary
# and wrk's own share of the CPU, and stops the service.
#   bash scripts/bench_throughput.sh            # fifo, 1 and 2 workers, 10 s each
#   PROFILE=tiresias WORKERS="1" bash scripts/bench_throughput.sh
# Needs wrk (`apt-get install wrk`). wrk runs on the same two cores as the service:
# its share of the CPU is printed from /proc after each run, and so is the service's own
# CPU time per request, the figure that other work on the machine disturbs least.
# `python -m app.cli` is `arbiter` run from this checkout (VENV, default .venv, picks the
# interpreter), so the figures are those of the code here.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv_bin="${VENV:-.venv}/bin"
profile="${PROFILE:-fifo}"
duration="${DURATION:-10}"
connections="${CONNECTIONS:-8}"
workers_list="${WORKERS:-1 2}"
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 2; }

workdir="$(mktemp -d "${TMPDIR:-/tmp}/arbiter-throughput.XXXXXX")"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT

"$venv_bin/python" - "$profile" > "$workdir/body.json" <<'EOF'
import json, sys
snapshot = json.load(open("examples/small.json"))
print(json.dumps({"profile": sys.argv[1], "snapshot": snapshot}, separators=(",", ":")))
EOF
cat > "$workdir/post.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$workdir/body.json", "r")
wrk.body = f:read("*a")
f:close()
EOF

# CPU ticks (user + system) of the service: the uvicorn process and its worker processes.
server_cpu_ticks() {
  local total=0 pid
  for pid in "$server_pid" $(pgrep -P "$server_pid" || true); do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}

# The interpreter and how its core is linked: its build moves these figures (docs/benchmarks.md).
echo "# $("$venv_bin/python" -c 'from evidence.runner import interpreter; print(interpreter())')"

for workers in $workers_list; do
  port="$("$venv_bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
  rm -f "$workdir/arbiter.db"
  ARBITER_DATABASE_URL="sqlite:///$workdir/arbiter.db" ARBITER_SPILL_DIR="$workdir/spill" \
    "$venv_bin/python" -m app.cli serve --port "$port" --workers "$workers" --log-level warning \
    > "$workdir/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
    sleep 0.5
  done
  # Warm every worker up before measuring.
  wrk -t1 -c"$connections" -d2s -s "$workdir/post.lua" "http://127.0.0.1:$port/v1/decisions" >/dev/null
  echo "## $profile, examples/small.json, $workers worker(s), wrk -t1 -c$connections -d${duration}s"
  server_cpu_start=$(server_cpu_ticks)
  wrk -t1 -c"$connections" -d"${duration}s" --latency -s "$workdir/post.lua" \
    "http://127.0.0.1:$port/v1/decisions" > "$workdir/wrk.out" &
  wrk_pid=$!
  sleep 0.2
  wrk_cpu_start=$(awk '{print $14 + $15}' "/proc/$wrk_pid/stat" 2>/dev/null || echo 0)
  sleep "$((duration - 1))"
  wrk_cpu_end=$(awk '{print $14 + $15}' "/proc/$wrk_pid/stat" 2>/dev/null || echo "$wrk_cpu_start")
  wait "$wrk_pid"
  server_cpu_end=$(server_cpu_ticks)
  cat "$workdir/wrk.out"
  ticks=$(getconf CLK_TCK)
  echo "wrk CPU over the last $((duration - 1)) s: $(( (wrk_cpu_end - wrk_cpu_start) * 100 / ticks / (duration - 1) )) % of one core"
  # The service's own CPU per answered request: less sensitive than requests/s to other
  # work on the machine. Requests are wrk's count (non-2xx would be listed above).
  requests=$(awk '/requests in/ {print $1}' "$workdir/wrk.out")
  "$venv_bin/python" -c 'import sys
ticks, start, end, requests = (float(a) for a in sys.argv[1:5])
print(f"service CPU: {(end - start) / ticks:.2f} s for {requests:.0f} requests = "
      f"{(end - start) / ticks / requests * 1000:.3f} ms per request")' \
    "$ticks" "$server_cpu_start" "$server_cpu_end" "$requests"
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
done
