#!/usr/bin/env bash
# For a machine with an NVIDIA GPU: build the CUDA parts, run the GPU tests, print a short table.
#
#   bash bench/gpu/run.sh
#
# NCCL comes from the CUDA toolkit when it has one (include/nccl.h), otherwise from NCCL_ROOT or
# the Python package nvidia-nccl (its directory holds include/nccl.h and lib/libnccl.so.2).
# State of play (issue 4): the GPU tests are NCCL grouped self send/recv on a one-rank
# communicator and the device executor on a one-rank plan, eager and captured into a graph
# (replayed, then updated for a new batch); eager-vs-graph and loopback timings
# come with the next steps (docs/06_cuda_execution.md). Finishes in a few minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)

if [ -z "${NCCL_ROOT:-}" ] && [ ! -f /usr/local/cuda/include/nccl.h ]; then
  NCCL_ROOT=$(python3 -c "import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null || true)
fi
export NCCL_ROOT="${NCCL_ROOT:-}"
echo "NCCL_ROOT=${NCCL_ROOT:-(from the CUDA toolkit)}"

gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build/gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DNCCL_ROOT="${NCCL_ROOT}" -DPIPETYPE_BUILD_BENCH=OFF >/dev/null
cmake --build build/gpu -j"$(nproc)" --target test_gpu test_cuda_runtime test_cuda
ctest --test-dir build/gpu -R "gpu|cuda" --output-on-failure | tee build/gpu/ctest.log

device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo "unknown")
passed=$(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' build/gpu/ctest.log || echo "?")
gpu=$(grep -E 'Test +#[0-9]+: gpu: ' build/gpu/ctest.log | head -1 | grep -Eo 'Passed|Failed|Skipped' || true)
echo
echo "| item | value |"
echo "|---|---|"
echo "| device | ${device} |"
echo "| CUDA / NCCL tests | ${passed} |"
echo "| GPU tests (NCCL self send/recv, device executor eager and graph) | ${gpu:-not run} |"
echo "| wall time | $(( $(date +%s) - start )) s |"
