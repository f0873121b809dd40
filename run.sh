#!/usr/bin/env bash
# The two commands of a fresh machine (README.md):
#   bash run.sh demo   build and run the main job: train_mlp (an MLP trained across 4 pipeline ranks with
#                      1F1B on host threads; flags pass through, e.g. --schedule interleaved-1f1b)
#   bash run.sh test   build everything and run every test (what CI runs)
# Each installs what it needs from Debian's packages first.
set -euo pipefail
cd "$(dirname "$0")"

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

need_packages() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v ninja >/dev/null || missing+=(ninja-build)
  command -v g++ >/dev/null || missing+=(g++)
  [ -f /usr/lib/cmake/doctest/doctestConfig.cmake ] || [ -f /usr/share/doctest/cmake/doctestConfig.cmake ] ||
    installed doctest-dev || missing+=(doctest-dev)
  installed libbenchmark-dev || missing+=(libbenchmark-dev)
  # tests only: MPI (optional for pipetype) — the MPI bootstrap's test runs two processes under mpirun
  if [ "${1:-}" = test ]; then installed libopenmpi-dev || missing+=(libopenmpi-dev); fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "run.sh: installing ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

case "${1:-}" in
  demo)
    need_packages
    cmake --preset release >/dev/null
    cmake --build --preset release --target train_mlp
    shift
    exec ./build/release/examples/train_mlp "$@"
    ;;
  test)
    need_packages test
    exec cmake --workflow --preset dev
    ;;
  *)
    echo "usage: bash run.sh demo [train_mlp flags] | bash run.sh test" >&2
    exit 2
    ;;
esac
