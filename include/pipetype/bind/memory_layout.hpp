// pipetype/bind/memory_layout.hpp — the stash pool of a step with memory actions, and its host pool.
//
// The slots are the lowering's (compile/memory_slots.hpp: mesh_op::stash_slot, host_slot, scratch,
// and each rank's counts, mesh_program::stash_slots and host_slots), proved by verify_memory; a
// step with memory actions runs with the sizes memory_sizes{stash bytes per stage, kept 0}. This
// header only gathers them per op for an executor and sizes a slot: the largest stash of the
// rank's stages.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetype/bind/stage_entry.hpp"
#include "pipetype/compile/memory_actions.hpp"
#include "pipetype/compile/mesh_program.hpp"
#include "pipetype/core/program.hpp"

namespace pipetype::detail {

/// One global rank's stash and host pools with memory actions: per op of its mesh program, the
/// device stash slot it reads or writes (compute ops, copies, recomputes; −1: none, or a
/// recomputed forward's scratch) and the host slot a copy uses.
struct memory_layout {
  std::size_t stride = 0;  // a stash slot: the largest stash of the rank's stages, 64-byte aligned
  int device_slots = 0, host_slots = 0;
  std::vector<int> device;    // per op of the rank's mesh program
  std::vector<int> host;      // per op (OFFLOAD, RELOAD)
  std::vector<char> scratch;  // per op: a recomputed forward, which writes the scratch block
  // per op, the device slots in use as it runs: freed before it (an OFFLOAD's `until`), taken by
  // it, freed after it (a last backward); an executor sums them into a measured high-water mark
  std::vector<int> freed_before, taken, freed_after;
};

/// The layout of global rank g of `mp` (lowered from `p` with memory actions `mem`) for the
/// model's stages `entries` (plan stage s runs entries[s % entries.size()]): the lowering's slots
/// (compile/memory_slots.hpp) and the stride of the rank's largest stash. Throws
/// std::invalid_argument when `mp` does not hold `mem`'s actions.
inline memory_layout memory_layout_of(const program_view& p, const memory_program& mem, const mesh_program& mp, int g,
                                      const std::vector<stage_entry>& entries) {
  if (mp.memory != mem || mp.stash_slots.size() != static_cast<std::size_t>(mp.shape.size()))
    throw std::invalid_argument("pipetype: the mesh step does not hold the memory actions it was bound with");
  const std::span<const mesh_op> ops = mp.rank_ops(g);
  memory_layout out;
  std::size_t largest = 0;
  for (const action& a : p.rank_actions(mp.shape.pipeline_rank(g)))
    largest = std::max(largest, entries[static_cast<std::size_t>(a.stage) % entries.size()].stash_bytes());
  out.stride = round_up64(largest);
  out.device_slots = mp.stash_slots[static_cast<std::size_t>(g)];
  out.host_slots = mp.host_slots[static_cast<std::size_t>(g)];
  for (const mesh_op& o : ops) {
    out.device.push_back(o.stash_slot);
    out.host.push_back(o.host_slot);
    out.scratch.push_back(o.scratch ? 1 : 0);
    out.freed_before.push_back(o.freed_before);
    out.taken.push_back(o.taken);
    out.freed_after.push_back(o.freed_after);
  }
  return out;
}

}  // namespace pipetype::detail
