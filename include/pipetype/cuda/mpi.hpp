// pipetype/cuda/mpi.hpp — bootstrap under MPI: who this process is, and NCCL's id by MPI_Bcast.
//
// Optional: include it in a program built with MPI (CMake: find_package(MPI), MPI::MPI_CXX).
// launch.hpp already reads mpirun's variables without MPI; this header uses MPI itself:
//
//   MPI_Init(&argc, &argv);
//   const pipetype::cuda::launch_info who = pipetype::cuda::launch_from_mpi();   // rank, world, rank on the node
//   pipetype::cuda::runtime_driver d{who.rank, who.local_rank};
//   const ncclUniqueId id = pipetype::cuda::unique_id_mpi();                      // rank 0 makes it, MPI_Bcast
//   auto comms = d.connect(id, who.world, plan.lowered());
//
// Every MPI and NCCL return code is checked (device_error names the call and MPI's words).
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <string>

#include "pipetype/cuda/launch.hpp"
#include "pipetype/cuda/runtime.hpp"

namespace pipetype::cuda {

namespace detail {
inline void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int n = 0;
  MPI_Error_string(rc, text, &n);
  throw device_error(std::string("pipetype::cuda: ") + call +
                     " failed: " + std::string(text, static_cast<std::size_t>(n)));
}
}  // namespace detail

/// Rank and size in `comm`, and the rank among the processes sharing this node (the GPU to use).
inline launch_info launch_from_mpi(MPI_Comm comm = MPI_COMM_WORLD) {
  launch_info l;
  l.launcher = "MPI";
  detail::check_mpi(MPI_Comm_rank(comm, &l.rank), "MPI_Comm_rank");
  detail::check_mpi(MPI_Comm_size(comm, &l.world), "MPI_Comm_size");
  MPI_Comm node = MPI_COMM_NULL;
  detail::check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, l.rank, MPI_INFO_NULL, &node),
                    "MPI_Comm_split_type");
  detail::check_mpi(MPI_Comm_rank(node, &l.local_rank), "MPI_Comm_rank");
  detail::check_mpi(MPI_Comm_free(&node), "MPI_Comm_free");
  return l;
}

/// NCCL's unique id on every rank of `comm`: rank 0 makes it, MPI_Bcast shares it (collective).
inline ncclUniqueId unique_id_mpi(MPI_Comm comm = MPI_COMM_WORLD) {
  ncclUniqueId id{};
  int rank = 0;
  detail::check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  int status = ncclSuccess;  // rank 0's, shared first, so a failure there does not leave the others waiting
  if (rank == 0) status = ncclGetUniqueId(&id);
  detail::check_mpi(MPI_Bcast(&status, 1, MPI_INT, 0, comm), "MPI_Bcast");
  if (status != ncclSuccess)
    throw device_error("pipetype::cuda: rank " + std::to_string(rank) +
                       ": rank 0's ncclGetUniqueId failed: " + ncclGetErrorString(static_cast<ncclResult_t>(status)));
  detail::check_mpi(MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, comm), "MPI_Bcast");
  return id;
}

}  // namespace pipetype::cuda
