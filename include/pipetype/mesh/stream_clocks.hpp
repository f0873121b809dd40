// pipetype/mesh/stream_clocks.hpp — happens-before on one rank of a mesh step.
//
// Per op of a global rank, a vector clock over the rank's streams: op a happens before op b iff
// clock[b][stream(a)] ≥ clock[a][stream(a)]. Program order on one stream, and an event's record
// before a wait on it (the latest record issued before the wait, as CUDA resolves it). The sends
// and recvs of an NCCL group share their group's clock: the group's own wait is issued before
// ncclGroupStart and its record after ncclGroupEnd (compile/lowered.hpp), so both cover every
// transfer in it. Nothing is assumed about how long an op takes. The memory pass
// (mesh/activation_slots.hpp) plans slots with it, and verify_memory proves them with it.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <vector>

#include "pipetype/mesh/ops.hpp"

namespace pipetype::detail {

using stream_clock = std::array<int, mesh_stream_count>;

/// Per op of global rank g (indexed from mp.begin[g]): its stream's clock after it.
constexpr std::vector<stream_clock> rank_clocks(const mesh_program& mp, int g) {
  const std::span<const mesh_op> ops = mp.rank_ops(g);
  std::vector<stream_clock> out(ops.size(), stream_clock{});
  stream_clock lane[mesh_stream_count]{};
  bool group_open[mesh_stream_count]{};
  std::vector<stream_clock> recorded(static_cast<std::size_t>(mp.events[static_cast<std::size_t>(g)]), stream_clock{});
  auto join = [](stream_clock& a, const stream_clock& b) {
    for (int s = 0; s < mesh_stream_count; ++s)
      a[static_cast<std::size_t>(s)] = std::max(a[static_cast<std::size_t>(s)], b[static_cast<std::size_t>(s)]);
  };
  auto event_ok = [&](int e) { return e >= 0 && static_cast<std::size_t>(e) < recorded.size(); };
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const mesh_op& o = ops[i];
    const auto s = static_cast<std::size_t>(o.stream >= 0 && o.stream < mesh_stream_count ? o.stream : 0);
    stream_clock& c = lane[s];
    const bool transfer = o.code == mesh_op_code::send || o.code == mesh_op_code::recv;
    if (transfer && group_open[s]) {  // inside its group: the group's wait and record cover it
      out[i] = c;
      continue;
    }
    group_open[s] = o.code == mesh_op_code::group;
    const int wait = o.code == mesh_op_code::wait ? o.event : o.wait_event;
    if (event_ok(wait)) join(c, recorded[static_cast<std::size_t>(wait)]);
    // a backward's bucket events may be recorded as soon as it starts: they order what waits for
    // them after what came before the backward, not after the backward
    for (int b = 0; o.bucket_event >= 0 && b < mp.buckets; ++b)
      if (event_ok(o.bucket_event + b)) recorded[static_cast<std::size_t>(o.bucket_event + b)] = c;
    ++c[s];
    out[i] = c;
    const int rec = o.code == mesh_op_code::record ? o.event : o.record_event;
    if (event_ok(rec)) recorded[static_cast<std::size_t>(rec)] = c;
  }
  return out;
}

/// Whether op a of `ops` happens before op b, given their clocks.
constexpr bool happens_before(std::span<const mesh_op> ops, const std::vector<stream_clock>& clock, int a, int b) {
  const auto sa = static_cast<std::size_t>(ops[static_cast<std::size_t>(a)].stream);
  return clock[static_cast<std::size_t>(b)][sa] >= clock[static_cast<std::size_t>(a)][sa];
}

}  // namespace pipetype::detail
