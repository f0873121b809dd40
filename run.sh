#!/usr/bin/env bash
# The two commands of a fresh machine (README.md):
#   bash run.sh demo   build and run the main job: train_mlp (an MLP trained across 4 pipeline ranks with
#                      1F1B on host threads; flags pass through, e.g. --schedule interleaved-1f1b)
#   bash run.sh test   build everything and run every test (what CI runs): the suite with clang++
#                      under ASan + UBSan with the fuzzer (45 s), the executors' tests under
#                      ThreadSanitizer, then the library's tests with g++ (Debug) and the examples'
#                      with g++ -O2, the binaries the pages' commands name
# Each installs what it needs from Debian's packages first; `test` also makes a virtual
# environment with torch from PyPI for the tests against PyTorch's runtime (docs/07_pytorch.md).
set -euo pipefail
cd "$(dirname "$0")"

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

need_packages() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v ninja >/dev/null || missing+=(ninja-build)
  command -v g++ >/dev/null || missing+=(g++)
  if [ "${1:-}" = test ]; then  # clang++ with its sanitizer and libFuzzer runtimes (tests/fuzz)
    command -v clang++ >/dev/null || missing+=(clang)
    compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null ||
      missing+=(libclang-rt-dev)
  fi
  [ -f /usr/lib/cmake/doctest/doctestConfig.cmake ] || [ -f /usr/share/doctest/cmake/doctestConfig.cmake ] ||
    installed doctest-dev || missing+=(doctest-dev)
  installed libbenchmark-dev || missing+=(libbenchmark-dev)
  # ccache: CMakeLists.txt compiles through it when it is installed (the cache lives under
  # ~/.cache/ccache, outside the tree), so a second test run rebuilds only what changed
  [ "${1:-}" = test ] && { command -v ccache >/dev/null || missing+=(ccache); }
  # tests only: MPI (optional for pipetype) — the MPI bootstrap's test runs two processes under mpirun;
  # Python with venv for PyTorch's runtime (tests/pytorch)
  if [ "${1:-}" = test ]; then
    installed libopenmpi-dev || missing+=(libopenmpi-dev)
    command -v python3 >/dev/null || missing+=(python3)
    python3 -c "import ensurepip, venv" 2>/dev/null || missing+=(python3-venv)
    command -v rsvg-convert >/dev/null || missing+=(librsvg2-bin)  # draws the SVGs (tests/pictures)
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "run.sh: installing ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# tests only: torch from PyPI (CPU use; the wheel brings its CUDA libraries, ~3 GB) in a virtual
# environment outside the build tree, made once; CMake finds it there (tests/CMakeLists.txt).
# The download runs in the background while the builds run (torch_venv_wait before the tests
# that need it).
venv="${XDG_CACHE_HOME:-$HOME/.cache}/pipetype/torch-venv"
torch_pid=""
torch_log=""
torch_venv_start() {
  if ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
    echo "run.sh: installing torch into $venv (in the background)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"  # CMake's configure looks for its python
    torch_log=$(mktemp)
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "torch>=2.15,<2.16" numpy >"$torch_log" 2>&1 &
    torch_pid=$!
    trap 'kill "$torch_pid" 2>/dev/null || true' EXIT  # a build that fails ends the download too
  fi
  export PIPETYPE_REQUIRE_TORCH=1
}
torch_venv_wait() {
  if [ -n "$torch_pid" ] && ! wait "$torch_pid"; then
    cat "$torch_log" >&2
    echo "run.sh: installing torch failed" >&2
    exit 1
  fi
  "$venv/bin/python" -c "import torch" || { echo "run.sh: torch does not import from $venv" >&2; exit 1; }
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
    torch_venv_start
    # Four presets, no target built twice in one configuration: clang (clang++ with ASan + UBSan:
    # the library's tests, the examples' and the fuzzer), tsan (the executors' tests), release
    # (g++ -O2: the examples and the benchmarks, with the examples' tests and the benchmark kit's
    # checks), dev (g++, Debug: the library's tests compiled syntax only, the LibTorch adapter's
    # built and run). The presets that
    # need no torch build and test first, while torch downloads; release and dev configure after
    # it, since they find LibTorch in the virtual environment, and build side by side. Their tests
    # then run as one pool of two jobs (the PyTorch runs first, the rest beside them). Each
    # phase's wall time is printed at the end (docs/03_diagnostics.md, "The test command").
    phases=()
    phase() {
      local name=$1 t0=$SECONDS
      shift
      "$@"
      phases+=("$(printf '%-34s %4d s' "$name" $((SECONDS - t0)))")
    }
    both_builds() {  # release and dev configure and build at once, two jobs each, so one's last units
      # (torch_gpt, the LibTorch tests) compile beside the other's instead of beside an idle core;
      # each line of their output starts with the preset's name
      local release_rc=0 dev_rc=0
      (set -o pipefail; { cmake --preset release && cmake --build --preset release; } 2>&1 | sed -u 's/^/release| /') &
      local release_pid=$!
      (set -o pipefail; { cmake --preset dev && cmake --build --preset dev; } 2>&1 | sed -u 's/^/dev| /') || dev_rc=$?
      wait "$release_pid" || release_rc=$?
      [ "$release_rc" -eq 0 ] && [ "$dev_rc" -eq 0 ]
    }
    both_tests() {  # one CTest over both build trees: its scheduler, resource locks and costs span them
      mkdir -p build/tests
      printf 'subdirs("%s" "%s")\n' "$PWD/build/release" "$PWD/build/dev" >build/tests/CTestTestfile.cmake
      ctest --test-dir build/tests -j2 --output-on-failure --timeout 600 --no-tests=error
    }
    phase "clang (ASan + UBSan, fuzz)" cmake --workflow --preset clang
    phase "tsan" cmake --workflow --preset tsan
    phase "waiting for torch" torch_venv_wait
    phase "release and dev: configure + build" both_builds
    phase "tests of release and dev" both_tests
    printf 'run.sh test: %s\n' "${phases[@]}" "$(printf '%-34s %4d s' total "$SECONDS")"
    ;;
  *)
    echo "usage: bash run.sh demo [train_mlp flags] | bash run.sh test" >&2
    exit 2
    ;;
esac
