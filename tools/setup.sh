#!/usr/bin/env bash
# Installs what manta needs from Debian 12 packages, when missing. Run as root
# (or with sudo available). CUDA is optional and never installed here.
#   (no flag)  building and running the library, the tools and the Python front
#   --tests    also what the tests and benchmarks need (GoogleTest, Google
#              Benchmark, Chromium, tmux, Open MPI's runtime, openssl,
#              iproute2, pytest, Prometheus's promtool, ccache)
#   --fuzz     also clang and its libFuzzer runtime (tests/fuzz)
# Flags combine: setup.sh --tests --fuzz.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libboost1.81-dev libboost-filesystem1.81-dev libboost-stacktrace1.81-dev
  libtbb-dev libcereal-dev nlohmann-json3-dev libcli11-dev libssl-dev
  libjs-chart.js    # the dashboard's chart, served locally
  # the Python front (python/): the extension is built with pybind11 for Debian's python3
  python3-dev python3-pybind11 pybind11-dev python3-cloudpickle python3-numpy
)
tests=0
for flag in "$@"; do
  case "$flag" in
    --tests)
      tests=1
      packages+=(
        libgtest-dev libgmock-dev libbenchmark-dev
        chromium tmux     # the dashboard in headless Chromium, the progress bar in a terminal
        openmpi-bin libopenmpi-dev  # a cluster launched by mpirun (its ranks meet over MPI)
        openssl           # certificates for a cluster over TLS
        iproute2          # two machines made of network namespaces
        python3-pytest python3-pytest-timeout
        ccache            # CI's build without the bridge reuses the first build's objects
      ) ;;
    --fuzz) packages+=(clang-14 libclang-rt-14-dev) ;;
    *) echo "manta setup: unknown flag '$flag' (--tests, --fuzz)" >&2; exit 2 ;;
  esac
done

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
updated=0
update_once() {
  if [ "$updated" = 0 ]; then "${sudo_cmd[@]}" apt-get update -qq; updated=1; fi
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "manta setup: installing ${missing[*]}"
  update_once
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "manta setup: all packages present"
fi

# The dashboard test checks /metrics with promtool. Debian ships it inside the
# prometheus package, whose installation would start a Prometheus server: only
# the one program is taken out of the package.
if [ "$tests" = 1 ] && ! command -v promtool >/dev/null; then
  echo "manta setup: installing promtool (from Debian's prometheus package)"
  update_once
  work=$(mktemp -d)
  chmod 0777 "$work"  # apt downloads as its own user
  (cd "$work" && apt-get download -qq prometheus && dpkg-deb -x prometheus_*.deb root)
  "${sudo_cmd[@]}" install -m 0755 "$work/root/usr/bin/promtool" /usr/local/bin/promtool
  rm -rf "$work"
fi
