#!/usr/bin/env bash
# For a machine with an NVIDIA GPU: build the CUDA parts, run the GPU tests, print a short table.
#
#   bash bench/gpu/run.sh
#
# NCCL comes from the CUDA toolkit when it has one (include/nccl.h), otherwise from NCCL_ROOT or
# the Python package nvidia-nccl (its directory holds include/nccl.h and lib/libnccl.so.2).
# What runs (ctest -L gpu, plus the record-driver tests):
#   - NCCL grouped self send/recv on a one-rank communicator; the device executor on a one-rank
#     plan, eager and captured into a graph (replayed, then updated for a new batch);
#   - the stage API a transformer needs, on two loopback ranks: an edge of two tensors (one at each
#     microbatch's length, one without a gradient), a sink reading its targets and writing its
#     losses, a batch missing a target refused;
#   - LibTorch module stages (docs/14) on two loopback ranks, 1F1B and ZB-H1, against the same
#     model unpipelined on the GPU, where this machine's python3 has torch with CUDA;
#   - examples/cuda_mlp --memory offload|recompute|both: the same with every stash offloaded to
#     pinned host memory and reloaded on a copy stream, or every forward recomputed (docs/13);
#   - examples/cuda_mlp: every schedule on 4 ranks over the loopback transport on this GPU, eager
#     and as one whole-pipeline graph, from a pipetype::batch (inputs and targets), gradients of the
#     mean loss checked against the unpipelined run (≤ 1e-5) and the losses the sinks wrote against
#     its losses; the NCCL path (non-blocking world communicator, splits, the rank's model part only)
#     on a one-rank world.
# Then the table: per schedule, host µs to issue a step eagerly and to launch its graph, device
# ms per step both ways, and the unpipelined run's time (every kernel one after the other on one
# stream: the sum of the stage kernels plus launch gaps). Finishes in a few minutes. Exits non-zero,
# after the table, when a GPU test, an example run or the build fails, or a GPU test skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)

if [ -z "${NCCL_ROOT:-}" ] && [ ! -f /usr/local/cuda/include/nccl.h ]; then
  NCCL_ROOT=$(python3 -c "import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null || true)
fi
export NCCL_ROOT="${NCCL_ROOT:-}"
echo "NCCL_ROOT=${NCCL_ROOT:-(from the CUDA toolkit)}"
if [ -n "${NCCL_ROOT}" ]; then export LD_LIBRARY_PATH="${NCCL_ROOT}/lib:${LD_LIBRARY_PATH:-}"; fi

gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# LibTorch module stages on the device (docs/14): where this machine's Python has torch with CUDA
torch_py=()
if python3 -c "import torch, sys; sys.exit(0 if torch.version.cuda else 1)" 2>/dev/null; then
  torch_py=(-DPIPETYPE_TORCH_PYTHON="$(command -v python3)")
fi
cmake -S . -B build/gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" \
      -DNCCL_ROOT="${NCCL_ROOT}" -DPIPETYPE_BUILD_BENCH=OFF "${torch_py[@]}" >/dev/null
targets=(test_gpu test_cuda_runtime test_cuda cuda_mlp)
if cmake --build build/gpu --target help | grep test_torch_gpu >/dev/null; then targets+=(test_torch_gpu); fi
if cmake --build build/gpu --target help | grep test_cuda_mpi >/dev/null; then targets+=(test_cuda_mpi); fi  # where MPI is found
cmake --build build/gpu -j"$(nproc)" --target "${targets[@]}"
# each step's failure is remembered, the table is printed, and the script then exits non-zero
failed=()
ctest --test-dir build/gpu -R "gpu|cuda" --output-on-failure | tee build/gpu/ctest.log || failed+=("ctest")

# the timing tables (one more run, 20 steps each way; then one NCCL group per peer and tick)
mlp=build/gpu/examples/cuda_mlp
"${mlp}" --graph --steps 20 | tee build/gpu/cuda_mlp.log || failed+=("cuda_mlp --graph")
"${mlp}" --graph --steps 20 --groups peer | tee build/gpu/cuda_mlp_peer.log || failed+=("cuda_mlp --graph --groups peer")
# memory actions (docs/13): every stash offloaded to pinned host memory and back, or every forward recomputed
"${mlp}" --graph --steps 20 --memory offload | tee build/gpu/cuda_mlp_offload.log || failed+=("cuda_mlp --memory offload")
"${mlp}" --graph --steps 20 --memory recompute | tee build/gpu/cuda_mlp_recompute.log || failed+=("cuda_mlp --memory recompute")

device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo "unknown")
passed=$(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' build/gpu/ctest.log || echo "?")
status() { grep -E "Test +#[0-9]+: $1" build/gpu/ctest.log | head -1 | grep -Eo 'Passed|Failed|Skipped|Timeout' || echo "not run"; }
echo
echo "| item | value |"
echo "|---|---|"
echo "| device | ${device} |"
echo "| CUDA / NCCL tests | ${passed} |"
echo "| GPU: NCCL self send/recv, one-rank executor eager + graph | $(status 'gpu: NCCL self') |"
echo "| GPU: loopback p=2, set edge + lengths + targets + losses | $(status 'gpu: loopback set edge') |"
echo "| GPU: cuda_mlp loopback p=4, every schedule, eager + graph, batch + losses | $(status 'gpu: cuda_mlp loopback') |"
echo "| GPU: cuda_mlp over NCCL, one-rank world, model part | $(status 'gpu: cuda_mlp over NCCL') |"
echo "| GPU: cuda_mlp loopback, offload + recompute, eager + graph | $(status 'gpu: cuda_mlp loopback, memory actions') |"
echo "| GPU: cuda_mlp loopback, offload to pinned memory, eager + graph | $(status 'gpu: cuda_mlp loopback, offload') |"
echo "| GPU: LibTorch module stages on the executor's streams, 1F1B + ZB-H1 (needs torch with CUDA) | $(status 'gpu: LibTorch module stages') |"
echo
echo "| schedule (p=4, m=8, loopback) | rel err | host µs/step eager | host µs/step graph | device ms/step eager | device ms/step graph | unpipelined ms |"
echo "|---|---|---|---|---|---|---|"
sed -nE 's/^([a-z0-9-]+) +loss [0-9.]+ +rel err ([0-9.e+-]+)( \(bitwise\))? .*host ([0-9.]+) us\/step +device ([0-9.]+) ms\/step +graph: host ([0-9.]+) us, device ([0-9.]+) ms +serial kernels ([0-9.]+) ms.*/| \1 | \2\3 | \4 | \6 | \5 | \7 | \8 |/p' \
  build/gpu/cuda_mlp.log
echo
echo "| schedule | device ms/step, groups per tick | per peer | graph, per tick | graph, per peer |"
echo "|---|---|---|---|---|"
field() { sed -nE "s/^$2 +loss .*device ([0-9.]+) ms\/step +graph: host [0-9.]+ us, device ([0-9.]+) ms.*/\\$3/p" "$1"; }
for s in $(sed -nE 's/^([a-z0-9-]+) +loss .*/\1/p' build/gpu/cuda_mlp.log); do
  echo "| $s | $(field build/gpu/cuda_mlp.log "$s" 1) | $(field build/gpu/cuda_mlp_peer.log "$s" 1) |" \
       "$(field build/gpu/cuda_mlp.log "$s" 2) | $(field build/gpu/cuda_mlp_peer.log "$s" 2) |"
done
echo
echo "| schedule | device ms/step: no memory actions | offload all | recompute all | graph: none | graph: offload | graph: recompute | rel err, offload |"
echo "|---|---|---|---|---|---|---|---|"
err() { sed -nE "s/^$2 +loss [0-9.]+ +rel err ([0-9.e+-]+).*/\\1/p" "$1"; }
for s in $(sed -nE 's/^([a-z0-9-]+) +loss .*/\1/p' build/gpu/cuda_mlp_offload.log); do
  echo "| $s | $(field build/gpu/cuda_mlp.log "$s" 1) | $(field build/gpu/cuda_mlp_offload.log "$s" 1) |" \
       "$(field build/gpu/cuda_mlp_recompute.log "$s" 1) | $(field build/gpu/cuda_mlp.log "$s" 2) |" \
       "$(field build/gpu/cuda_mlp_offload.log "$s" 2) | $(field build/gpu/cuda_mlp_recompute.log "$s" 2) |" \
       "$(err build/gpu/cuda_mlp_offload.log "$s") |"
done
echo
echo "wall time: $(( $(date +%s) - start )) s"
# a skipped GPU test (exit 77: no device visible) is a failure here: this script is for a GPU machine
if grep -Eq 'Test +#[0-9]+: gpu.*(Skipped|Not Run)' build/gpu/ctest.log; then failed+=("a GPU test skipped (no device?)"); fi
if [ ${#failed[@]} -gt 0 ]; then
  printf 'bench/gpu/run.sh: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
