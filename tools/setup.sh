#!/usr/bin/env bash
# Installs manta's build and test dependencies from Debian 12 packages when missing.
# Run as root (or with sudo available). CUDA is optional and never installed here.
# With --fuzz it also installs clang and its libFuzzer runtime (tests/fuzz).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libboost1.81-dev libboost-filesystem1.81-dev libboost-stacktrace1.81-dev
  libtbb-dev libcereal-dev nlohmann-json3-dev libcli11-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libjs-chart.js    # the dashboard's chart, served locally
  chromium tmux     # tests: the dashboard in headless Chromium, the progress bar in a terminal
  openmpi-bin libopenmpi-dev  # mpirun's ranks meet over MPI; tests: a cluster launched by mpirun
  openssl           # tests: certificates for a cluster over TLS
  iproute2          # tests: two machines made of network namespaces
  # the Python front (python/): the extension is built with pybind11 for Debian's python3
  python3-dev python3-pybind11 pybind11-dev python3-cloudpickle python3-numpy python3-pytest python3-pytest-timeout
)
[ "${1:-}" = "--fuzz" ] && packages+=(clang-14 libclang-rt-14-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "manta setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "manta setup: all dependencies present"
fi
