#!/usr/bin/env bash
# Two machines on one box: a "CPU VM" and a "GPU host" in their own network
# namespaces, joined by a veth pair shaped like a real link (tc netem; where the
# kernel has no netem, tbf gives the rate and the delay is left out, with a warning).
# ferryd serves in the GPU host; a Ferry program runs in the CPU VM and offloads.
#
#   sudo samples/two_hosts/two_hosts.sh [--delay 0.5ms] [--rate 1gbit] [--build DIR] [-- command...]
#
# Default command: DIR/samples/two_hosts_offload. The command sees FERRY_REMOTES,
# FERRY_TOKEN_FILE and FERRY_TWO_HOSTS_DIR (a scratch dir it may write to).
# Exit 77 (ctest's skip) when it cannot run here: not root, or no `ip netns`.
set -euo pipefail

NS_CPU=ferry-cpu-vm NS_GPU=ferry-gpu-host        # prefixed: never clash with anyone's namespaces
DEV_CPU=ferry-cpu0 DEV_GPU=ferry-gpu0            # veth ends (<= 15 chars), one in each namespace
IP_CPU=10.77.0.1 IP_GPU=10.77.0.2                # private, and only ever inside these namespaces
DELAY="" RATE="" BUILD="" CMD=()
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() { sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case $1 in
    --delay) DELAY=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; CMD=("$@"); break ;;
    *) echo "two_hosts: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
BUILD=${BUILD:-$here/../../build}
FERRYD=${FERRYD:-$BUILD/tools/ferryd}
((${#CMD[@]})) || CMD=("$BUILD/samples/two_hosts_offload")

say() { echo "two_hosts: $*"; }
skip() { echo "two_hosts: SKIP: $*" >&2; exit 77; }
[[ $(id -u) == 0 ]] || skip "needs root (network namespaces, veth, tc)"
command -v ip >/dev/null && ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available"
ip netns add ferry-probe-$$ 2>/dev/null && ip netns del ferry-probe-$$ || skip "cannot create network namespaces here"
[[ -x $FERRYD ]] || { echo "two_hosts: no ferryd at $FERRYD (build it, or pass --build DIR)" >&2; exit 2; }

# One run at a time: the namespace names are fixed.
exec 9>/run/ferry-two-hosts.lock
flock -w 600 9 || { echo "two_hosts: another run holds /run/ferry-two-hosts.lock" >&2; exit 1; }

tmp="" ferryd_pid=""
cleanup() {
  local rc=$?
  set +e
  if [[ -n $ferryd_pid ]] && kill -0 "$ferryd_pid" 2>/dev/null; then
    say "stopping ferryd (pid $ferryd_pid)"
    kill -TERM "$ferryd_pid"; for _ in {1..50}; do kill -0 "$ferryd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$ferryd_pid" 2>/dev/null; wait "$ferryd_pid" 2>/dev/null
  fi
  [[ -n $tmp && $rc != 0 && -s $tmp/ferryd.log ]] && { say "ferryd's log:"; sed 's/^/  ferryd| /' "$tmp/ferryd.log"; }
  for ns in "$NS_CPU" "$NS_GPU"; do
    ip netns del "$ns" 2>/dev/null && say "deleted namespace $ns"   # takes its veth end with it
  done
  [[ -n $tmp ]] && rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Stale namespaces from a run that was killed -9: only ours (by name), and only
# processes still inside them, which such a run started.
for ns in "$NS_CPU" "$NS_GPU"; do
  if ip netns list | grep -qw "^$ns"; then
    say "removing stale namespace $ns"
    for pid in $(ip netns pids "$ns"); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns"
  fi
done

say "creating namespaces $NS_CPU ($IP_CPU) and $NS_GPU ($IP_GPU) joined by veth $DEV_CPU <-> $DEV_GPU"
ip netns add "$NS_CPU"
ip netns add "$NS_GPU"
# Created straight inside the namespaces, so the names never exist in the root one.
ip link add "$DEV_CPU" netns "$NS_CPU" type veth peer name "$DEV_GPU" netns "$NS_GPU"
ip -n "$NS_CPU" addr add "$IP_CPU/24" dev "$DEV_CPU"
ip -n "$NS_GPU" addr add "$IP_GPU/24" dev "$DEV_GPU"
for ns in "$NS_CPU" "$NS_GPU"; do ip -n "$ns" link set lo up; done
ip -n "$NS_CPU" link set "$DEV_CPU" up
ip -n "$NS_GPU" link set "$DEV_GPU" up
# UCX lists only interfaces that are up and running: wait for the carrier.
for pair in "$NS_CPU:$DEV_CPU" "$NS_GPU:$DEV_GPU"; do
  for _ in {1..50}; do
    [[ $(ip netns exec "${pair%%:*}" cat "/sys/class/net/${pair#*:}/operstate") == up ]] && break
    sleep 0.1
  done
done

# tbf's bucket: 1 ms of traffic at RATE (at least 128 KiB), or it cannot reach
# the rate with timer-sized bursts.
tbf_burst() {
  local r=${1,,} mult=1
  case $r in *gbit) mult=1000000000 ;; *mbit) mult=1000000 ;; *kbit) mult=1000 ;; *bit) ;; *) echo 131072; return ;; esac
  local n=${r%%[a-z]*}
  awk -v n="$n" -v m="$mult" 'BEGIN { b = n * m / 8 / 1000; if (b < 131072) b = 131072; printf "%d", b }'
}
if [[ -n $DELAY || -n $RATE ]]; then
  # On both ends, so each direction sees the delay and the rate. A large queue
  # limit: netem's default 1000 packets would drop at high rate x delay.
  netem=(netem limit 100000)
  [[ -n $DELAY ]] && netem+=(delay "$DELAY")
  [[ -n $RATE ]] && netem+=(rate "$RATE")
  for pair in "$NS_CPU:$DEV_CPU" "$NS_GPU:$DEV_GPU"; do
    ns=${pair%%:*} dev=${pair#*:}
    if ip netns exec "$ns" tc qdisc add dev "$dev" root "${netem[@]}" 2>/dev/null; then
      say "shaped $dev: ${netem[*]}"
    elif [[ -n $RATE ]]; then
      # Some kernels are built without sch_netem; tbf still gives the rate.
      ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$RATE" burst "$(tbf_burst "$RATE")" latency 50ms
      say "shaped $dev: tbf rate $RATE (this kernel has no netem${DELAY:+: WARNING, delay $DELAY NOT applied})"
    else
      say "WARNING: this kernel has no netem: delay $DELAY NOT applied on $dev"
    fi
  done
fi

tmp=$(mktemp -d /tmp/ferry-two-hosts.XXXXXX)
chmod 700 "$tmp"
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token")
say "token in $tmp/token (mode $(stat -c %a "$tmp/token"))"

# UCX_TLS=tcp: shared memory (and CMA) would connect the two processes on this
# box directly and bypass the veth, so the link (and netem) would not be used.
# UCX_NET_DEVICES pins each side to its veth end, not lo.
ip netns exec "$NS_GPU" env UCX_TLS=tcp UCX_NET_DEVICES="$DEV_GPU" \
  "$FERRYD" --listen "$IP_GPU:0" --token-file "$tmp/token" --port-file "$tmp/port" >"$tmp/ferryd.log" 2>&1 &
ferryd_pid=$!
for _ in {1..100}; do
  [[ -s $tmp/port ]] && break
  kill -0 "$ferryd_pid" 2>/dev/null || { echo "two_hosts: ferryd exited before listening" >&2; exit 1; }
  sleep 0.1
done
[[ -s $tmp/port ]] || { echo "two_hosts: ferryd wrote no port in 10 s" >&2; exit 1; }
port=$(<"$tmp/port")
say "ferryd (pid $ferryd_pid) listening on $IP_GPU:$port in $NS_GPU"

say "running in $NS_CPU: ${CMD[*]}"
rc=0
ip netns exec "$NS_CPU" env UCX_TLS=tcp UCX_NET_DEVICES="$DEV_CPU" \
  FERRY_REMOTES="ucx://$IP_GPU:$port" FERRY_TOKEN_FILE="$tmp/token" FERRY_TWO_HOSTS_DIR="$tmp" \
  "${CMD[@]}" || rc=$?
say "command exited with $rc"
exit "$rc"
