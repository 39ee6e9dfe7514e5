#!/usr/bin/env bash
# The one place that knows Ferry's Debian packages. Installs only what is
# missing, so it is quick and harmless to run again. Needs root to install.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  ccache                            # the README's commands reuse compiled objects between runs
  libspdlog-dev libfmt-dev          # logging (all layers)
  libgtest-dev libbenchmark-dev libstarpu-dev  # tests; bench/ (StarPU is a peer there)
  libucx-dev libibverbs-dev         # ferry info: UCX transports, RDMA devices
  libtbb-dev libopenblas-dev liblapacke-dev  # runtime: CPU workers, built-in kernels
  libcli11-dev nlohmann-json3-dev   # the ferry command-line tool
  libsodium-dev libssl-dev          # identities and key exchange (libsodium), AES-256-GCM seals (OpenSSL)
  prometheus-cpp-dev libcivetweb-dev  # ferryd: metrics and its HTTP port
  clang libclang-rt-14-dev          # the protocol fuzzer (libFuzzer)
  iproute2 ucx-utils                # two-namespace test (ip netns); ucx_perftest, the transfer peer
  nftables                          # reverse-connection test: a namespace that drops inbound connections
  xz-utils                          # scripts/gpu-kit packs the GPU kit with xz
  python3-dev python3-venv          # the ferry Python package (built by pip into a virtual environment)
)

# Intel's multi-buffer crypto library seals AES-256-GCM 2-3x faster than
# OpenSSL 3.0 on x86 (optional: the build falls back to OpenSSL); Debian
# builds it for amd64 only.
if [ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ]; then
  packages+=(libipsec-mb-dev)
fi

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "ferry: all ${#packages[@]} build dependencies are installed"
  exit 0
fi

echo "ferry: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=sudo
  else
    echo "ferry: run as root (or install sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
