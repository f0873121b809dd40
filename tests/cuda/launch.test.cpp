// Multi-process launch without CUDA: the launcher's variables, and NCCL's id shared through a file.
#include <pipetype/cuda/launch.hpp>

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_launch {

namespace pc = pipetype::cuda;
using namespace std::chrono_literals;

namespace {
constexpr const char* all_vars[] = {"RANK",
                                    "WORLD_SIZE",
                                    "LOCAL_RANK",
                                    "OMPI_COMM_WORLD_RANK",
                                    "OMPI_COMM_WORLD_SIZE",
                                    "OMPI_COMM_WORLD_LOCAL_RANK",
                                    "PMI_RANK",
                                    "PMI_SIZE",
                                    "MPI_LOCALRANKID",
                                    "SLURM_PROCID",
                                    "SLURM_NTASKS",
                                    "SLURM_LOCALID"};
void clear_env() {
  for (const char* v : all_vars) ::unsetenv(v);
}
}  // namespace

TEST_CASE("cuda launch: rank, world and local rank from each launcher's variables") {
  clear_env();
  pc::launch_info l = pc::launch_from_env();
  CHECK((l.rank == 0 && l.world == 1 && l.local_rank == 0 && l.launcher == "none"));

  ::setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  l = pc::launch_from_env();
  CHECK((l.rank == 3 && l.world == 4 && l.local_rank == 1 && l.launcher == "Open MPI"));

  ::setenv("RANK", "2", 1);  // torchrun-style variables win
  ::setenv("WORLD_SIZE", "8", 1);
  l = pc::launch_from_env();
  CHECK((l.rank == 2 && l.world == 8 && l.local_rank == 2 && l.launcher == "RANK/WORLD_SIZE"));

  clear_env();
  ::setenv("SLURM_PROCID", "1", 1);
  ::setenv("SLURM_NTASKS", "2", 1);
  ::setenv("SLURM_LOCALID", "0", 1);
  l = pc::launch_from_env();
  CHECK((l.rank == 1 && l.world == 2 && l.local_rank == 0 && l.launcher == "Slurm"));
  clear_env();
}

TEST_CASE("cuda launch: inconsistent variables are refused by name") {
  clear_env();
  ::setenv("RANK", "4", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  CHECK_THROWS_WITH(pc::launch_from_env(), doctest::Contains("rank 4 is not in a world of 4"));
  ::setenv("WORLD_SIZE", "four", 1);
  CHECK_THROWS_WITH(pc::launch_from_env(), doctest::Contains("WORLD_SIZE=four is not a non-negative integer"));
  ::unsetenv("WORLD_SIZE");
  CHECK_THROWS_WITH(pc::launch_from_env(), doctest::Contains("WORLD_SIZE is not set"));
  clear_env();
}

TEST_CASE("cuda launch: rank 0 shares bytes through a file, the others wait for it") {
  const std::string path = "pipetype_share_test_" + std::to_string(std::rand()) + ".id";
  std::remove(path.c_str());
  std::array<std::byte, 128> id{};
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::byte>(i * 37 + 1);
  std::vector<std::array<std::byte, 128>> got(3);
  std::vector<std::thread> readers;
  for (int r = 1; r <= 3; ++r)
    readers.emplace_back([&, r] { pc::share_bytes(path, r, got[static_cast<std::size_t>(r) - 1], 10s); });
  std::this_thread::sleep_for(20ms);  // the readers start first and wait
  pc::share_bytes(path, 0, id);
  for (std::thread& t : readers) t.join();
  for (const auto& g : got) CHECK(g == id);
  std::remove(path.c_str());
  // nobody writes: a reader gives up at its deadline, naming the file
  std::array<std::byte, 128> none{};
  CHECK_THROWS_WITH(pc::share_bytes(path, 2, none, 50ms), doctest::Contains("waited 50 ms for rank 0 to write"));
}

}  // namespace test_launch
}  // namespace
