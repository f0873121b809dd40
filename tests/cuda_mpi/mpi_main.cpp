// Run under `mpirun -np 2` (CTest does): the MPI bootstrap on CPU — launch_from_mpi agrees with
// the launcher's variables (launch_from_env), and unique_id_mpi gives every rank rank 0's id.
// No GPU needed: ncclGetUniqueId works without one. Exit 0 when every check holds on every rank.
#include <pipetype/cuda/launch.hpp>
#include <pipetype/cuda/mpi.hpp>

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "test_cuda_mpi: FAILED: %s\n", what);
      ++failures;
    }
  };
  try {
    const pipetype::cuda::launch_info m = pipetype::cuda::launch_from_mpi();
    const pipetype::cuda::launch_info e = pipetype::cuda::launch_from_env();
    expect(m.world == 2, "two ranks (run under mpirun -np 2)");
    expect(m.rank == e.rank && m.world == e.world, "launch_from_env reads mpirun's rank and size");
    expect(m.local_rank == e.local_rank, "the local rank agrees");
    const ncclUniqueId id = pipetype::cuda::unique_id_mpi();
    std::vector<char> all(sizeof(id.internal) * static_cast<std::size_t>(m.world));
    MPI_Allgather(id.internal, sizeof(id.internal), MPI_BYTE, all.data(), sizeof(id.internal), MPI_BYTE,
                  MPI_COMM_WORLD);
    bool same = true, nonzero = false;
    for (std::size_t i = 0; i < sizeof(id.internal); ++i) nonzero = nonzero || all[i] != 0;
    for (int r = 1; r < m.world; ++r)
      same = same && std::memcmp(all.data(), all.data() + sizeof(id.internal) * static_cast<std::size_t>(r),
                                 sizeof(id.internal)) == 0;
    expect(same, "every rank has rank 0's id");
    expect(nonzero, "the id is not empty");
    if (failures == 0) std::printf("test_cuda_mpi: rank %d of %d (%s): ok\n", m.rank, m.world, e.launcher.c_str());
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "test_cuda_mpi: %s\n", ex.what());
    ++failures;
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
