// pipetype/bind/norm_parts.hpp — what a mesh step's GRAD_NORM and FINITE_CHECK sum on one global
// rank, the same for both executors: per stage of its pipeline rank, in stage order, the part of
// the stage's reduced weight gradients the rank answers for — its own shard when the step's
// reductions scatter (ZeRO-1, FSDP), all of them on replica 0 otherwise (the replicas hold the
// same sums), none on the other replicas — less a tied parameter's span on every stage of its tie
// group but the first (a tied parameter counted once). The host executor squares them itself
// (stage_entry::sumsq); the device executor asks each stage (sum_squares, graph/stage.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "pipetype/bind/stage_entry.hpp"
#include "pipetype/mesh/ops.hpp"

namespace pipetype::detail {

/// Elements [begin, end) of stage `stage`'s reduced weight gradients (`array`, elements of `size`
/// bytes): one part of a rank's sum of squares.
struct norm_part {
  int stage = 0;
  std::span<std::byte> array;
  std::size_t size = 0, begin = 0, end = 0;
};

/// Global rank `global`'s parts (see the top of this file), its pipeline rank's `stages` taken in
/// increasing order; `check(entry, stage)` sees every stage that has weight gradients (whether or
/// not this rank answers for any of them), to refuse one its executor cannot square.
template <class EntryOf, class Check>
std::vector<norm_part> norm_parts(const mesh_program& mp, std::vector<int> stages, int global, EntryOf&& entry_of,
                                  Check&& check, const std::string& who) {
  std::sort(stages.begin(), stages.end());
  const int d = mp.shape.replica(global);
  std::vector<norm_part> out;
  for (const int s : stages) {
    const stage_entry& e = entry_of(s);
    std::size_t size = 0;
    const std::span<std::byte> a = collective_array(e, false, -1, s, size, who);
    const std::size_t n = size ? a.size() / size : 0;
    if (n == 0) continue;
    check(e, s);
    const shard_range own =
        mp.scatters_gradients() ? shard_of(n, mp.shape.dp, d) : shard_range{0, d == 0 ? n : std::size_t{0}};
    shard_range skip{};  // a tied span counted on its group's first stage only
    for (int t = 0; t < static_cast<int>(mp.ties.size()); ++t) {
      const std::vector<int>& grp = mp.ties[static_cast<std::size_t>(t)];
      if (std::find(grp.begin(), grp.end(), s) == grp.end() || *std::min_element(grp.begin(), grp.end()) == s) continue;
      const std::span<std::byte> tied = e.tied_of ? e.tied_of(e.obj, t) : std::span<std::byte>{};
      const auto at = static_cast<std::size_t>(tied.data() - a.data()) / size;
      skip = {at, at + tied.size() / size};
    }
    auto part = [&](std::size_t b0, std::size_t e0) {
      if (b0 < e0) out.push_back({s, a, size, b0, e0});
    };
    part(own.begin, std::min(own.end, skip.size() ? skip.begin : own.end));
    if (skip.size()) part(std::max(own.begin, skip.end), own.end);
  }
  return out;
}

}  // namespace pipetype::detail
