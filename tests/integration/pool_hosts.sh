#!/usr/bin/env bash
# A pool of GPU hosts on one box: a client namespace joined to N host
# namespaces, each by its own veth pair shaped with tc tbf to its own rate
# (this kernel has no netem, so links differ in rate, not in delay). One
# ferryd serves in each host namespace; the command runs in the client's.
#
#   pool_hosts.sh [--rates 1gbit,200mbit,50mbit] [--workers 2] [--plugin LIB]
#                 [--host-cpus LIST --client-cpus LIST]
#                 [--prefix ferry-pool] [--hosts-only] FERRYD -- command...
#
# --host-cpus/--client-cpus (taskset lists) keep the hosts' kernels off the
# client's cores, so that on one box a host is capacity beside the client's
# CPU rather than a share of it.
#
# The command sees FERRY_REMOTES (every host, in --rates order), FERRY_TOKEN_FILE
# and FERRY_POOL_HOSTS (the hosts' addresses, space-separated, same order).
# --hosts-only: no ferryd is started; the command starts (and kills, and
# restarts) its own, one in each host namespace, as tests/chaos does. It
# sees FERRY_POOL_NAMESPACES and FERRY_POOL_DEVICES (each host's namespace
# and its end of the link, in the same order) and no FERRY_REMOTES.
# --prefix names the namespaces (PREFIX-client, PREFIX-hostN), the links
# and the lock, so two users of this script do not share them.
# Exit 77 (ctest's skip) when it cannot run here: not root, or no `ip netns`.
set -euo pipefail

RATES=1gbit,200mbit,50mbit WORKERS=2 PLUGIN="" HOST_CPUS="" CLIENT_CPUS="" CMD=() PREFIX=ferry-pool HOSTS_ONLY=0
while (($#)); do
  case $1 in
    --rates) RATES=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --plugin) PLUGIN=$2; shift 2 ;;
    --host-cpus) HOST_CPUS=$2; shift 2 ;;
    --client-cpus) CLIENT_CPUS=$2; shift 2 ;;
    --prefix) PREFIX=$2; shift 2 ;;
    --hosts-only) HOSTS_ONLY=1; shift ;;
    --) shift; CMD=("$@"); break ;;
    -*) echo "pool_hosts: unknown argument '$1'" >&2; exit 2 ;;
    *) FERRYD=$1; shift ;;
  esac
done
[[ -n ${FERRYD:-} && ${#CMD[@]} -gt 0 ]] || { sed -n '2,23p' "${BASH_SOURCE[0]}" >&2; exit 2; }
[[ $PREFIX =~ ^[a-z]+-[a-z]+$ && ${#PREFIX} -le 12 ]] || { echo "pool_hosts: --prefix is word-word, 12 letters at most" >&2; exit 2; }
DEV=${PREFIX%%-*}-p  # link names: DEVcN / DEVhN, within the kernel's 15 characters
pin_host=() pin_client=()
[[ -n $HOST_CPUS ]] && pin_host=(taskset -c "$HOST_CPUS")
[[ -n $CLIENT_CPUS ]] && pin_client=(taskset -c "$CLIENT_CPUS")
IFS=, read -r -a rates <<<"$RATES"
((${#rates[@]} >= 1 && ${#rates[@]} <= 8)) || { echo "pool_hosts: 1 to 8 rates" >&2; exit 2; }

say() { echo "pool_hosts: $*"; }
skip() { echo "pool_hosts: SKIP: $*" >&2; exit 77; }
[[ -z $HOST_CPUS$CLIENT_CPUS ]] || command -v taskset >/dev/null || skip "no taskset (util-linux) for --host-cpus/--client-cpus"
[[ $(id -u) == 0 ]] || skip "needs root (network namespaces, veth, tc)"
command -v ip >/dev/null && ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available"
command -v tc >/dev/null || skip "no tc (iproute2)"
ip netns add "${PREFIX%%-*}-probe-$$" 2>/dev/null && ip netns del "${PREFIX%%-*}-probe-$$" || skip "cannot create network namespaces here"
[[ -x $FERRYD ]] || { echo "pool_hosts: no ferryd at $FERRYD" >&2; exit 2; }

# Fixed names (prefixed, never anyone else's): one run at a time.
NS_CLIENT=$PREFIX-client
exec 9>"/run/$PREFIX-hosts.lock"
flock -w 600 9 || { echo "pool_hosts: another run holds /run/$PREFIX-hosts.lock" >&2; exit 1; }

tmp="" pids=()
namespaces() { echo "$NS_CLIENT"; for i in "${!rates[@]}"; do echo "$PREFIX-host$i"; done; }
cleanup() {
  local rc=$?
  set +e
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in {1..50}; do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  done
  if [[ -n $tmp && $rc != 0 ]]; then
    for log in "$tmp"/ferryd*.log; do [[ -s $log ]] && { say "$(basename "$log"):"; sed 's/^/  | /' "$log"; }; done
  fi
  # What the command started inside them and left behind (a --hosts-only
  # command that died without stopping its ferryd) goes with them: deleting
  # a namespace does not end its processes.
  for ns in $(namespaces); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  [[ -n $tmp ]] && rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Stale namespaces of a run killed -9: ours by name, and only what runs inside them.
for ns in $(namespaces) "$PREFIX"-host{0..7}; do
  if ip netns list | grep -qw "^$ns"; then
    for pid in $(ip netns pids "$ns"); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns"
  fi
done

tbf_burst() {  # 1 ms of traffic at the rate, at least 128 KiB (as samples/two_hosts)
  local r=${1,,} mult=1
  case $r in *gbit) mult=1000000000 ;; *mbit) mult=1000000 ;; *kbit) mult=1000 ;; *) echo 131072; return ;; esac
  awk -v n="${r%%[a-z]*}" -v m="$mult" 'BEGIN { b = n * m / 8 / 1000; if (b < 131072) b = 131072; printf "%d", b }'
}

ip netns add "$NS_CLIENT"
ip -n "$NS_CLIENT" link set lo up
# The client's namespace routes between the hosts, as the network between
# the hosts of a pool would: host-to-host transfers cross it, not the client.
ip netns exec "$NS_CLIENT" sysctl -qw net.ipv4.ip_forward=1
client_devs=() hosts=()
for i in "${!rates[@]}"; do
  ns=$PREFIX-host$i dev_c=${DEV}c$i dev_h=${DEV}h$i
  ip_c=10.78.$((i + 1)).1 ip_h=10.78.$((i + 1)).2
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "$dev_c" netns "$NS_CLIENT" type veth peer name "$dev_h" netns "$ns"
  ip -n "$NS_CLIENT" addr add "$ip_c/24" dev "$dev_c"
  ip -n "$ns" addr add "$ip_h/24" dev "$dev_h"
  ip -n "$NS_CLIENT" link set "$dev_c" up
  ip -n "$ns" link set "$dev_h" up
  # The client's worker address lists all its links' addresses, and a host
  # may dial any of them back: the host reaches them all over its own link.
  ip -n "$ns" route add default via "$ip_c"
  for pair in "$NS_CLIENT:$dev_c" "$ns:$dev_h"; do
    ip netns exec "${pair%%:*}" tc qdisc add dev "${pair#*:}" root tbf rate "${rates[$i]}" \
      burst "$(tbf_burst "${rates[$i]}")" latency 50ms
    for _ in {1..50}; do
      [[ $(ip netns exec "${pair%%:*}" cat "/sys/class/net/${pair#*:}/operstate") == up ]] && break
      sleep 0.1
    done
  done
  say "host $i: $ip_h in $ns, link $dev_c <-> $dev_h shaped to tbf rate ${rates[$i]}"
  client_devs+=("$dev_c")
  hosts+=("$ip_h")
done

tmp=$(mktemp -d /tmp/ferry-pool-hosts.XXXXXX)
chmod 700 "$tmp"
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token")

# UCX_TLS=tcp: shared memory would join the processes on this box directly,
# bypassing the links; UCX_NET_DEVICES pins each ferryd to its veth end.
remotes=() host_devs=()
for i in "${!hosts[@]}"; do host_devs+=("${DEV}h$i"); done
if ((HOSTS_ONLY)); then
  rc=0
  ip netns exec "$NS_CLIENT" env UCX_TLS=tcp UCX_NET_DEVICES="$(IFS=,; echo "${client_devs[*]}")" \
    FERRY_POOL_HOSTS="${hosts[*]}" FERRY_POOL_NAMESPACES="$(namespaces | tail -n +2 | tr '\n' ' ')" \
    FERRY_POOL_DEVICES="${host_devs[*]}" "${pin_client[@]}" "${CMD[@]}" 9>&- || rc=$?
  say "command exited with $rc"
  exit "$rc"
fi
for i in "${!hosts[@]}"; do
  extra=()
  [[ -n $PLUGIN ]] && extra=(--plugin "$PLUGIN")
  ip netns exec "$PREFIX-host$i" env UCX_TLS=tcp UCX_NET_DEVICES="${DEV}h$i" \
    "${pin_host[@]}" "$FERRYD" --listen "${hosts[$i]}:0" --token-file "$tmp/token" --port-file "$tmp/port$i" \
    --workers "$WORKERS" --gpus none "${extra[@]}" >"$tmp/ferryd$i.log" 2>&1 9>&- &
  pids+=($!)
done
for i in "${!hosts[@]}"; do
  for _ in {1..100}; do
    [[ -s $tmp/port$i ]] && break
    kill -0 "${pids[$i]}" 2>/dev/null || { echo "pool_hosts: ferryd $i exited before listening" >&2; exit 1; }
    sleep 0.1
  done
  [[ -s $tmp/port$i ]] || { echo "pool_hosts: ferryd $i wrote no port in 10 s" >&2; exit 1; }
  remotes+=("ucx://${hosts[$i]}:$(<"$tmp/port$i")")
done
say "ferryd on ${remotes[*]}"

rc=0
ip netns exec "$NS_CLIENT" env UCX_TLS=tcp UCX_NET_DEVICES="$(IFS=,; echo "${client_devs[*]}")" \
  FERRY_REMOTES="$(IFS=,; echo "${remotes[*]}")" FERRY_TOKEN_FILE="$tmp/token" FERRY_POOL_HOSTS="${hosts[*]}" \
  "${pin_client[@]}" "${CMD[@]}" 9>&- || rc=$?
say "command exited with $rc"
exit "$rc"
