// pipetype/bind/memory_layout.hpp — the stash pool of a step with memory actions, and its host pool.
//
// The slots are the lowering's (mesh/memory_slots.hpp: mesh_op::stash_slot, host_slot, scratch,
// and each rank's counts, mesh_program::stash_slots and host_slots), proved by verify_memory; a
// step with memory actions runs with the sizes memory_sizes{stash bytes per stage, kept 0}. This
// header only hands them to an executor with the stride of a slot: the largest stash of the
// rank's stages; a host slot holds that stash, then the inputs the copy moves (most_moved_inputs).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetype/bind/stage_entry.hpp"
#include "pipetype/mesh/memory_actions.hpp"
#include "pipetype/mesh/verify.hpp"
#include "pipetype/core/program.hpp"

namespace pipetype::detail {

/// One global rank's stash and host pools with memory actions: the slot stride, the pools'
/// slots, and the rank's mesh ops, which say per op the device stash slot it reads or writes,
/// the host slot a copy uses, whether it writes the scratch block, and the pool slots it takes and
/// frees (mesh_op::stash_slot, host_slot, scratch, freed_before, taken, freed_after).
struct memory_layout {
  std::size_t stride = 0;  // a stash slot: the largest stash of the rank's stages, 64-byte aligned
  int device_slots = 0, host_slots = 0;
  std::span<const mesh_op> ops;  // the rank's, in the mesh program it was made from
};

/// The layout of global rank g of `mp` (lowered with memory actions `mem`), with stash slots of
/// `stride` bytes (the rank's rank_pools::stash_stride, compile/pool_bytes.hpp). Throws
/// std::invalid_argument when `mp` does not hold `mem`'s actions.
inline memory_layout memory_layout_of(const memory_program& mem, const mesh_program& mp, int g, std::size_t stride) {
  const auto n = static_cast<std::size_t>(mp.shape.size());
  if (mp.memory != mem || mp.stash_slots.size() != n || mp.host_slots.size() != n)
    throw std::invalid_argument("pipetype: the mesh step does not hold the memory actions it was bound with");
  return {stride, mp.stash_slots[static_cast<std::size_t>(g)], mp.host_slots[static_cast<std::size_t>(g)],
          mp.rank_ops(g)};
}

/// Refuses (std::invalid_argument, one sentence) an OFFLOAD on global rank g of `mp` that would
/// move a whole microbatch of a stage that keeps state for its backward outside its stash
/// (stage_entry::saves_outside_stash: a LibTorch module's autograd graph), which no copy can move;
/// an OFFLOAD of a recomputed forward's input (mesh_op::kept_only) is fine. `entry(stage)` gives a
/// plan stage's entry.
template <class EntryOf>
void check_offloads_movable(const mesh_program& mp, int g, EntryOf&& entry) {
  for (const mesh_op& o : mp.rank_ops(g))
    if (o.code == mesh_op_code::offload && !o.kept_only && entry(o.stage).saves_outside_stash)
      throw std::invalid_argument(
          "pipetype: global rank " + std::to_string(g) + ", stage " + std::to_string(o.stage) + ", microbatch " +
          std::to_string(o.microbatch) +
          ": an OFFLOAD of a forward the step does not recompute, but the stage keeps what its backward needs "
          "outside its stash (saves_outside_stash: a LibTorch module's autograd graph), which a copy cannot move; "
          "recompute the microbatches it offloads (memory_options::recompute), so that only their inputs move");
}

/// The most inputs one OFFLOAD of global rank g moves with its stash (mesh/activation_slots.hpp):
/// a host slot holds the stash, then that many activation slots.
inline std::size_t most_moved_inputs(const mesh_program& mp, int g) {
  int most = 0;
  for (const mesh_op& o : mp.rank_ops(g))
    if (o.code == mesh_op_code::offload) most = std::max(most, mp.act_count(o));
  return static_cast<std::size_t>(most);
}

/// The bytes a copy moves of each of the `n` inputs it moves for stage entry `e`, in activation
/// slots of `stride` bytes: a chain stage's input, or the whole slot over a fan-in's edges.
inline std::size_t moved_input_bytes(const stage_entry& e, int n, std::size_t stride) {
  return n == 1 && e.in_edges.empty() ? std::min(stride, e.in.bytes) : stride;
}

}  // namespace pipetype::detail
