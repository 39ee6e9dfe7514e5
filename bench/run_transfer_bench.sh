#!/usr/bin/env bash
# "bulk transfer" and "remote empty task round trip" against
# ucx_perftest on the same transport: for each UCX_TLS row, a local ferryd and
# ucx_perftest (ucp_am_bw per size, ucp_am_lat for latency) run under that
# UCX_TLS, then ferry_bench_transfer compares against them, and prints a
# 10,000-task chain pinned to the ferryd (beside the same chain on the local
# CPU) and the idle CPU of a runtime with the remote connected. Extra args go
# to ferry_bench_transfer (e.g. --sweep-mib= to skip the chunk sweep).
#   run_transfer_bench.sh BUILD_DIR [ferry_bench_transfer args...]
#   run_transfer_bench.sh BUILD_DIR --only=h2h [ferry_bench_h2h args...]
# --only=h2h: two ferryd on loopback; a host-to-host edge of 256 MiB from one
# to the other against a direct client -> host ship in the same run, as a
# ratio (ferry_bench_h2h; JSON in BUILD_DIR/bench/bench-h2h.json).
# Env: TRANSFER_TLS ("tcp default"; "default" leaves UCX_TLS unset, so UCX may
# pick shared memory), TRANSFER_SIZES (MiB, "1 4 16 64 256"), PERFTEST_REPS (3:
# best of). JSON lands in BUILD_DIR/bench/bench-transfer-<tls>.json.
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR [args...]}" && pwd); shift
ferryd=$build/tools/ferryd bench=$build/bench/ferry_bench_transfer
sizes=${TRANSFER_SIZES:-1 4 16 64 256} reps=${PERFTEST_REPS:-3}
if [[ ${1:-} == --only=h2h ]]; then
  shift
  h2h=$build/bench/ferry_bench_h2h
  # The same kind of link both ways: ferryd never opens a shared-memory lane
  # to another ferryd (docs/protocol.md), so the client's ship to B must not
  # use one either; between real hosts neither exists.
  export FERRY_SHARED_MEMORY=0
  [[ -x $ferryd && -x $h2h ]] || { echo "run_transfer_bench: build ferryd and ferry_bench_h2h first" >&2; exit 2; }
  tmp=$(mktemp -d) pids=()
  trap 'for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done; rm -rf "$tmp"' EXIT
  (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token")
  for host in a b; do
    "$ferryd" --listen 127.0.0.1:0 --token-file "$tmp/token" --port-file "$tmp/$host.port" --gpus none \
      >"$tmp/$host.log" 2>&1 &
    pids+=($!)
  done
  for host in a b; do
    for _ in {1..100}; do [[ -s $tmp/$host.port ]] && break; sleep 0.1; done
    [[ -s $tmp/$host.port ]] || { echo "run_transfer_bench: ferryd $host wrote no port" >&2; cat "$tmp/$host.log" >&2; exit 1; }
  done
  mkdir -p "$build/bench"
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores (other work on this machine shows in the figures)"
  "$h2h" --a="127.0.0.1:$(cat "$tmp/a.port")" --b="127.0.0.1:$(cat "$tmp/b.port")" --token-file="$tmp/token" \
    --out="$build/bench/bench-h2h.json" "$@"
  exit
fi
command -v ucx_perftest >/dev/null || { echo "run_transfer_bench: ucx_perftest not found (ucx-utils)" >&2; exit 2; }
[[ -x $ferryd && -x $bench ]] || { echo "run_transfer_bench: build ferryd and ferry_bench_transfer first" >&2; exit 2; }

tmp=$(mktemp -d) ferryd_pid="" server_pid=""
stop() {  # only the processes this script started, by pid
  for pid in $server_pid $ferryd_pid; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  server_pid="" ferryd_pid=""
}
trap 'stop; rm -rf "$tmp"' EXIT
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token")

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# One ucx_perftest server/client pair; prints the client's "Final:" line.
perftest() {
  local port; port=$(free_port)
  ucx_perftest -p "$port" >"$tmp/server.log" 2>&1 & server_pid=$!
  local line=""
  for _ in {1..50}; do  # the server takes a moment to listen
    line=$(ucx_perftest 127.0.0.1 -p "$port" "$@" 2>/dev/null | grep '^Final:' || true)
    [[ -n $line ]] && break
    sleep 0.2
  done
  wait "$server_pid" 2>/dev/null || true; server_pid=""
  [[ -n $line ]] || { echo "run_transfer_bench: ucx_perftest $* gave no result" >&2; exit 1; }
  echo "$line"
}

# Fewer iterations for big messages: each size moves about 1-2 GB.
iters() { local n=$((2048 / $1)); ((n < 8)) && n=8; echo "$n"; }

for tls in ${TRANSFER_TLS:-tcp default}; do
  if [[ $tls == default ]]; then unset UCX_TLS; else export UCX_TLS=$tls; fi
  echo "== UCX_TLS=$tls =="
  peer_bw=""
  for m in $sizes; do
    best=0
    for _ in $(seq "$reps"); do  # overall MB/s (MiB/s), column 7 of the Final line
      bw=$(perftest -t ucp_am_bw -s $((m << 20)) -n "$(iters "$m")" -w 4 | awk '{print $7}')
      best=$(awk -v a="$best" -v b="$bw" 'BEGIN{print (b > a) ? b : a}')
    done
    echo "ucx_perftest ucp_am_bw $m MiB: $best MB/s (best of $reps)"
    peer_bw+="${peer_bw:+,}$m:$best"
  done
  lat=1e300
  for _ in $(seq "$reps"); do  # median one-way latency (µs), column 3
    l=$(perftest -t ucp_am_lat -s 8 -n 20000 -w 1000 | awk '{print $3}')
    lat=$(awk -v a="$lat" -v b="$l" 'BEGIN{print (b < a) ? b : a}')
  done
  echo "ucx_perftest ucp_am_lat 8 B: $lat us one-way median (best of $reps)"
  # The same ping-pong with threads that block between messages (-E sleep),
  # as Ferry's do: what a round trip costs without busy-polling.
  sleep_lat=1e300
  for _ in $(seq "$reps"); do
    l=$(perftest -t ucp_am_lat -s 8 -n 5000 -w 200 -E sleep | awk '{print $3}')
    sleep_lat=$(awk -v a="$sleep_lat" -v b="$l" 'BEGIN{print (b < a) ? b : a}')
  done
  echo "ucx_perftest ucp_am_lat -E sleep 8 B: $sleep_lat us one-way median (best of $reps)"

  : >"$tmp/port"
  "$ferryd" --listen 127.0.0.1:0 --token-file "$tmp/token" --port-file "$tmp/port" >"$tmp/ferryd.log" 2>&1 &
  ferryd_pid=$!
  for _ in {1..100}; do [[ -s $tmp/port ]] && break; sleep 0.1; done
  [[ -s $tmp/port ]] || { echo "run_transfer_bench: ferryd wrote no port" >&2; cat "$tmp/ferryd.log" >&2; exit 1; }
  rc=0
  "$bench" --remote="127.0.0.1:$(cat "$tmp/port")" --token-file="$tmp/token" --tls="$tls" \
    --sizes="${sizes// /,}" --peer-bw="$peer_bw" --peer-lat-us="$lat" --peer-sleep-lat-us="$sleep_lat" --ferryd-pid="$ferryd_pid" \
    --out="$build/bench/bench-transfer-$tls.json" "$@" || rc=$?
  stop
  ((rc == 0)) || { echo "run_transfer_bench: ferry_bench_transfer failed ($rc); ferryd's log:" >&2; cat "$tmp/ferryd.log" >&2; exit "$rc"; }
done
