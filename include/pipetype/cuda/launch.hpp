// pipetype/cuda/launch.hpp — who am I in a multi-process launch, and how the ranks share NCCL's id.
//
// CUDA-free (tested on CPU); runtime.hpp's bootstrap builds on it.
//
// launch_from_env() reads the rank, the world size and the rank on this node from the variables
// the common launchers set, first match wins:
//   torchrun, our scripts   RANK, WORLD_SIZE, LOCAL_RANK
//   Open MPI (mpirun -np N) OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   MPICH / Hydra           PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
//   Slurm (srun)            SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
// and none of them: one process (rank 0 of 1). So `mpirun -np 4 ./app` works without linking MPI.
//
// NCCL's 128-byte unique id must reach every rank before ncclCommInitRank. Without MPI there are
// two ways, both supported by runtime.hpp's `unique_id`: NCCL_COMM_ID=<host>:<port> (every rank
// computes the same id itself, rank 0 starts the root), or a file every rank can see:
// share_bytes() has rank 0 write the bytes to `path.tmp.<pid>` and rename it to `path` (atomic),
// and the others wait for `path` to appear, up to a deadline.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>

#include <unistd.h>

namespace pipetype::cuda {

struct launch_info {
  int rank = 0;
  int world = 1;
  int local_rank = 0;             // the device to use: cudaSetDevice(local_rank)
  std::string launcher = "none";  // which variables were read
};

namespace detail {
inline int env_int(const char* name, int fallback, bool required) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    if (required) throw std::invalid_argument(std::string("pipetype::cuda: launch: ") + name + " is not set");
    return fallback;
  }
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1'000'000)
    throw std::invalid_argument(std::string("pipetype::cuda: launch: ") + name + "=" + v +
                                " is not a non-negative integer");
  return static_cast<int>(x);
}
}  // namespace detail

/// The rank, world size and local rank from the launcher's environment (see the header).
inline launch_info launch_from_env() {
  struct scheme {
    const char *rank, *world, *local, *name;
  };
  static constexpr scheme schemes[] = {
      {"RANK", "WORLD_SIZE", "LOCAL_RANK", "RANK/WORLD_SIZE"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "PMI"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "Slurm"},
  };
  for (const scheme& s : schemes) {
    if (!std::getenv(s.rank)) continue;
    launch_info l;
    l.launcher = s.name;
    l.rank = detail::env_int(s.rank, 0, true);
    l.world = detail::env_int(s.world, 0, true);
    l.local_rank = detail::env_int(s.local, l.rank, false);
    if (l.world < 1 || l.rank >= l.world)
      throw std::invalid_argument("pipetype::cuda: launch (" + l.launcher + "): rank " + std::to_string(l.rank) +
                                  " is not in a world of " + std::to_string(l.world));
    return l;
  }
  return {};
}

/// Rank 0 publishes `bytes` at `path`; every other rank waits (up to `deadline`) for the file and
/// reads them into `bytes`. Rank 0 writes a temporary file and renames it, so a reader never sees
/// half an id. Remove `path` (or use a fresh one) before the next launch.
inline void share_bytes(const std::string& path, int rank, std::span<std::byte> bytes,
                        std::chrono::milliseconds deadline = std::chrono::seconds(60)) {
  if (path.empty()) throw std::invalid_argument("pipetype::cuda: share_bytes: no file given");
  if (rank == 0) {
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      if (!out) throw std::runtime_error("pipetype::cuda: share_bytes: cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw std::runtime_error("pipetype::cuda: share_bytes: cannot rename " + tmp + " to " + path);
    return;
  }
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      if (in.gcount() == static_cast<std::streamsize>(bytes.size())) return;
      throw std::runtime_error("pipetype::cuda: share_bytes: " + path + " holds " + std::to_string(in.gcount()) +
                               " bytes, expected " + std::to_string(bytes.size()) + " (a stale file?)");
    }
    if (std::chrono::steady_clock::now() > until)
      throw std::runtime_error("pipetype::cuda: share_bytes: rank " + std::to_string(rank) + " waited " +
                               std::to_string(deadline.count()) + " ms for rank 0 to write " + path);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace pipetype::cuda
