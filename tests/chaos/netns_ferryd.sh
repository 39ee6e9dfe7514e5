#!/usr/bin/env bash
# ferryd inside its host's network namespace, for the chaos harness's
# namespace variant (FERRY_TEST_FERRYD names this script there): the
# namespace follows from the --listen address among the arguments, looked
# up in FERRY_POOL_HOSTS / FERRY_POOL_NAMESPACES / FERRY_POOL_DEVICES
# (tests/integration/pool_hosts.sh --hosts-only). Every step execs, so the
# harness's pid is ferryd's own: kill -9 and SIGSTOP reach it.
set -euo pipefail
listen=""
for ((i = 1; i < $#; ++i)); do
  [[ ${!i} == --listen ]] && { j=$((i + 1)); listen=${!j%:*}; }
done
read -r -a hosts <<<"${FERRY_POOL_HOSTS:?}"
read -r -a namespaces <<<"${FERRY_POOL_NAMESPACES:?}"
read -r -a devices <<<"${FERRY_POOL_DEVICES:?}"
for i in "${!hosts[@]}"; do
  if [[ ${hosts[$i]} == "$listen" ]]; then
    # UCX_TLS=tcp: shared memory would join the processes directly, around the links.
    exec ip netns exec "${namespaces[$i]}" env UCX_TLS=tcp UCX_NET_DEVICES="${devices[$i]}" "${FERRY_CHAOS_FERRYD:?}" "$@"
  fi
done
echo "netns_ferryd: --listen '$listen' is not among FERRY_POOL_HOSTS ($FERRY_POOL_HOSTS)" >&2
exit 2
