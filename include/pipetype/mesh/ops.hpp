// pipetype/mesh/ops.hpp — what a mesh step is made of: its ops, communicators and streams.
//
// lower_mesh (mesh/lower.hpp) writes a mesh_program; the memory pass
// (mesh/memory_slots.hpp) gives a step with memory actions its stash and host slots; the
// proofs (verify_mesh, verify_memory) and the executors read it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pipetype/core/action.hpp"
#include "pipetype/core/mesh.hpp"
#include "pipetype/mesh/memory_actions.hpp"

namespace pipetype {

enum class mesh_op_code : std::uint8_t {
  compute,
  send,
  recv,
  group,
  record,          // cudaEventRecord(event, stream): no work
  wait,            // cudaStreamWaitEvent(stream, event): no work
  all_reduce,      // REDUCE_GRAD, or a tie group's reduction
  reduce_scatter,  // REDUCE_GRAD with sharded parameters
  all_gather,      // UNSHARD
  release,         // RESHARD: the gathered parameters freed (no communication)
  local_sum,       // a tie group held by one rank: its stages' tied gradients summed there (no communication)
  offload,         // OFFLOAD(s, j): the saved activation copied to the host pool (mesh/memory_actions.hpp)
  reload,          // RELOAD(s, j): copied back to the device
  recompute,       // RECOMPUTE(s, j): F(s, j) run again from its kept input, on the compute stream
  grad_norm,       // GRAD_NORM: the ranks' squared gradient norms all-reduced over the whole mesh
  finite_check,    // FINITE_CHECK: whether the ranks' gradients are all finite, over the whole mesh
  optimizer_step,  // OPT_STEP: the stage's optimizer on its replica's part (no communication)
  param_sync,      // PARAM_SYNC: ZeRO-1's all-gather of the stage's updated parameters
};

/// The third stream of a mesh rank (after stream_id::compute = 0 and stream_id::comm = 1), and
/// the fourth: the copy stream of OFFLOAD and RELOAD.
inline constexpr int dp_stream = 2;
inline constexpr int copy_stream = 3;
inline constexpr int mesh_stream_count = 4;

constexpr bool is_copy(mesh_op_code c) noexcept { return c == mesh_op_code::offload || c == mesh_op_code::reload; }

constexpr bool is_collective(mesh_op_code c) noexcept {
  return c == mesh_op_code::all_reduce || c == mesh_op_code::reduce_scatter || c == mesh_op_code::all_gather ||
         c == mesh_op_code::grad_norm || c == mesh_op_code::finite_check || c == mesh_op_code::param_sync;
}

constexpr const char* mesh_op_name(mesh_op_code c) noexcept {
  switch (c) {
    case mesh_op_code::compute:
      return "compute";
    case mesh_op_code::send:
      return "send";
    case mesh_op_code::recv:
      return "recv";
    case mesh_op_code::group:
      return "group";
    case mesh_op_code::record:
      return "record";
    case mesh_op_code::wait:
      return "wait";
    case mesh_op_code::all_reduce:
      return "all-reduce";
    case mesh_op_code::reduce_scatter:
      return "reduce-scatter";
    case mesh_op_code::all_gather:
      return "all-gather";
    case mesh_op_code::release:
      return "release";
    case mesh_op_code::local_sum:
      return "local sum";
    case mesh_op_code::offload:
      return "offload";
    case mesh_op_code::reload:
      return "reload";
    case mesh_op_code::recompute:
      return "recompute";
    case mesh_op_code::grad_norm:
      return "grad norm";
    case mesh_op_code::finite_check:
      return "finite check";
    case mesh_op_code::optimizer_step:
      return "optimizer step";
    case mesh_op_code::param_sync:
      return "param sync";
  }
  return "?";
}

struct mesh_op {
  mesh_op_code code = mesh_op_code::compute;
  int stream = 0;           // 0 compute, 1 comm, 2 dp, 3 copy
  kind what = kind::F;      // compute: the action's kind; send/recv: F activation, B gradient; recompute: F
  bool overlapped = false;  // compute: runs together with the next compute op
  int stage = -1;           // compute, transfers, memory actions and the stage's collectives: the stage
  int microbatch = -1;      // compute, transfers and memory actions
  int peer = -1;            // send/recv: the other global rank
  int comm = -1;            // send/recv and collectives: the mesh communicator
  int tie = -1;             // a tie group's all-reduce: the group
  int event = -1;           // record/wait ops: the event
  int wait_event = -1;      // a pipeline op's own wait (lowered.hpp)
  int record_event = -1;    // a pipeline op's own record
  int source = -1;          // the index of the pipeline op (in its rank's lowered list) it copies; -1: added
  bool kept_only = false;   // OFFLOAD/RELOAD of a forward that is recomputed: only its kept input moves
  // a step with memory actions (mesh/memory_slots.hpp; −1 and 0 in one without):
  int stash_slot = -1;   // compute, copies, RECOMPUTE: the device stash slot it writes or reads
  int host_slot = -1;    // OFFLOAD, RELOAD: the host slot it writes or reads
  bool scratch = false;  // a forward that is recomputed: writes its stash to a scratch block no one reads
  // the device stash slots in use around it: freed before it (an OFFLOAD's `until`), taken by it,
  // freed after it (a last backward); an executor sums them into a measured high-water mark
  std::int8_t freed_before = 0, taken = 0, freed_after = 0;
  // a step with memory actions (mesh/activation_slots.hpp): where its activation-pool references
  // are in mesh_program::act_map; −1: it has none
  int act = -1;
  // a sharded step (mesh/lower.hpp): the parameter slot an UNSHARD gathers into, a RESHARD
  // returns, and a compute or RECOMPUTE of a sharded stage reads its parameters from; −1 elsewhere
  int param_slot = -1;
  // a bucketed step (dp_options::buckets > 1, mesh/lower.hpp): a REDUCE_GRAD's bucket (bucket_of);
  // the last weight backward of a stage whose reduction follows it records events bucket_event …
  // bucket_event + buckets − 1 as it finishes writing each bucket (at its end, at the latest).
  // −1 elsewhere
  int bucket = -1;
  int bucket_event = -1;

  friend constexpr bool operator==(const mesh_op&, const mesh_op&) = default;
};

enum class mesh_comm_kind : std::uint8_t { pipeline, data_parallel, tie, world };

struct mesh_comm {
  mesh_comm_kind what = mesh_comm_kind::pipeline;
  int index = -1;            // pipeline: its lowered communicator; data_parallel: the pipeline rank; tie: the group
                             // (world: every global rank, for GRAD_NORM and FINITE_CHECK; −1)
  int replica = -1;          // pipeline and tie: the replica; data_parallel: -1
  std::vector<int> members;  // global ranks, increasing

  friend bool operator==(const mesh_comm&, const mesh_comm&) = default;
};

struct mesh_program {
  mesh shape{};
  std::vector<int> begin;  // [size + 1]: global rank g's ops are ops[begin[g] .. begin[g+1])
  std::vector<mesh_op> ops;
  std::vector<mesh_comm> comms;
  std::vector<int> events;             // per global rank: its event pool's size
  std::vector<std::vector<int>> ties;  // the tie groups' stages (dp_options::ties), for the executors
  memory_program memory{};             // the memory actions it was lowered with (ranks 0: none), for the executors
  std::vector<int> stash_slots;        // with memory actions, per global rank: its device stash pool's slots
  std::vector<int> host_slots;         // and its host pool's (mesh/memory_slots.hpp); else empty
  std::vector<int> activation_slots;   // with memory actions, per global rank: its activation pool's slots
  std::vector<int> act_map;            // per op with act ≥ 0, at act: n, then n × (lowered slot, slot, writes)
  std::vector<int> param_slots;        // sharded (dp > 1), per global rank: its parameter pool's slots; else empty
  int buckets = 1;                     // a REDUCE_GRAD's buckets (dp_options::buckets)
  int zero = 0;                        // dp_options::zero: 1 when an OPT_STEP updates its replica's shard

  /// Whether its reductions leave each replica its shard (ZeRO-1, or FSDP: the step has parameter
  /// slots), which is what an OPT_STEP then updates.
  constexpr bool scatters_gradients() const noexcept { return (zero > 0 || !param_slots.empty()) && shape.dp > 1; }

  constexpr std::span<const mesh_op> rank_ops(int g) const {
    const auto b = static_cast<std::size_t>(begin[static_cast<std::size_t>(g)]);
    const auto e = static_cast<std::size_t>(begin[static_cast<std::size_t>(g) + 1]);
    return std::span<const mesh_op>(ops).subspan(b, e - b);
  }
  /// Op o's activation-pool references (mesh/activation_slots.hpp): each the activation slot of
  /// the lowered program (lowered_op::slot, slots_of) it reads or writes, the slot of the step's
  /// own pool it is in at o, and whether o writes it. Empty for an op with none.
  struct act_ref {
    int lowered = -1, slot = -1;
    bool writes = false;
  };
  constexpr int act_count(const mesh_op& o) const { return o.act >= 0 ? act_map[static_cast<std::size_t>(o.act)] : 0; }
  constexpr act_ref act_at(const mesh_op& o, int k) const {
    const auto at = static_cast<std::size_t>(o.act) + 1 + 3 * static_cast<std::size_t>(k);
    return {act_map[at], act_map[at + 1], act_map[at + 2] != 0};
  }
  /// The slot of the step's pool that op o finds lowered activation slot `lowered` in (−1: none).
  constexpr int act_slot(const mesh_op& o, int lowered) const {
    for (int k = 0; k < act_count(o); ++k)
      if (const act_ref x = act_at(o, k); x.lowered == lowered) return x.slot;
    return -1;
  }
  /// The communicator id of a DP group (pipeline rank r), or −1 when the mesh has one replica.
  constexpr int dp_comm(int r) const {
    for (std::size_t c = 0; c < comms.size(); ++c)
      if (comms[c].what == mesh_comm_kind::data_parallel && comms[c].index == r) return static_cast<int>(c);
    return -1;
  }
};

}  // namespace pipetype
