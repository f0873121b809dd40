// pipetype/mesh/memory_slots.hpp — the stash and host slots of a step with memory actions.
//
// What a stage saves for its backward besides its input is its stash. With memory actions
// (mesh/memory_actions.hpp) an OFFLOAD copies a microbatch's stash to a host slot (its input
// too, which mesh/activation_slots.hpp moves out of the activation pool), a RELOAD copies it
// back into a device slot, and a forward that will be recomputed
// writes its stash to a scratch block that no one reads (its RECOMPUTE writes it again into a slot
// of its own before the backward). lower_mesh runs this pass last, on each global rank's ops in
// their order, turning memory_of's accounting into slots:
//
//   device slots   taken by a forward (not a recomputed one), a RELOAD and a RECOMPUTE, lowest
//                  free first; freed after the last backward of the microbatch on the rank (a slot
//                  the first half of an overlapped pair frees stays taken through the second) and
//                  at an OFFLOAD's `until`, the compute op that waits for the copy. Until then only
//                  a RELOAD may take it: the copy stream runs its copies in order, so the OFFLOAD
//                  has completed when the RELOAD starts
//   host slots     taken by an OFFLOAD, freed when the backward or RECOMPUTE that reads the
//                  RELOADed stash runs (the RELOAD has completed then). A slot holds the stash,
//                  then the inputs the copy moves (mesh/activation_slots.hpp). The OFFLOAD and
//                  RELOAD of a forward that is recomputed move no stash, only its input: they take
//                  a host slot when they move one (not on a first stage, which reads the batch)
//
// The results are mesh_op::stash_slot, host_slot, scratch and the pool's take/free counts per op,
// and per global rank mesh_program::stash_slots and host_slots: the step's peak in stash slots,
// constants of a plan that is a type like every other pool (mesh/memory_plan.hpp). The slot
// counts do not depend on the stages' sizes. verify_memory proves that no slot is written while
// an op of its previous holder may still read or copy it.
#pragma once

#include <cstddef>
#include <span>
#include <stdexcept>
#include <vector>

#include "pipetype/mesh/memory_actions.hpp"
#include "pipetype/mesh/ops.hpp"
#include "pipetype/core/program.hpp"

namespace pipetype::detail {

/// The lowest slot of `pool` that is free (0), or draining (2) when `draining_too`; grows the pool
/// when none is. Marks it taken (1) and returns it; `borrowed`: it was draining.
constexpr int take_slot(std::vector<char>& pool, bool draining_too, bool& borrowed) {
  std::size_t k = 0;
  while (k < pool.size() && !(pool[k] == 0 || (draining_too && pool[k] == 2))) ++k;
  if (k == pool.size()) pool.push_back(0);
  borrowed = pool[k] == 2;
  pool[k] = 1;
  return static_cast<int>(k);
}

/// Assigns global rank g's stash and host slots in `mp`, lowered from `p` with memory actions
/// `mem` (the top of this file), and writes its counts. Throws std::invalid_argument when `mp`
/// does not hold `mem`'s actions for the rank.
constexpr void assign_memory_slots(const program_view& p, const memory_program& mem, mesh_program& mp, int g) {
  const int r = mp.shape.pipeline_rank(g);
  const auto b = static_cast<std::size_t>(mp.begin[static_cast<std::size_t>(g)]);
  const auto n = static_cast<std::size_t>(mp.begin[static_cast<std::size_t>(g) + 1]) - b;
  const std::span<mesh_op> ops = std::span<mesh_op>(mp.ops).subspan(b, n);
  const std::span<const action> acts = p.rank_actions(r);
  const std::span<const memory_action> mine = mem.rank_ops(r);
  const auto M = static_cast<std::size_t>(p.microbatches);
  const auto cell = [M](int s, int j) { return static_cast<std::size_t>(s) * M + static_cast<std::size_t>(j); };
  const std::size_t cells = static_cast<std::size_t>(p.stages) * M;
  // per (stage, microbatch): its last backward's action index, whether it is recomputed
  std::vector<int> last_backward(cells, -1);
  std::vector<char> recomputed(cells, 0);
  for (std::size_t i = 0; i < acts.size(); ++i)
    if (acts[i].what != kind::F) last_backward[cell(acts[i].stage, acts[i].microbatch)] = static_cast<int>(i);
  for (const memory_action& a : mine)
    if (a.what == memory_kind::recompute) recomputed[cell(a.stage, a.microbatch)] = 1;
  const bool forward_only = is_forward_only(p);
  // slot states: 0 free, 1 taken, 2 draining (an OFFLOAD copies out of it until its `until`)
  std::vector<char> slot, host;
  bool borrowed = false;
  std::vector<int> at(cells, -1), at_host(cells, -1);  // a microbatch's device and host slots
  std::vector<char> reading(cells, 0);                 // reloaded: its host slot is freed at its first read
  std::vector<int> drain_slot, drain_until;            // OFFLOADs still copying: their slot, their `until`
  std::size_t next = 0;                                // the next memory action
  int action_index = -1, held = -1;
  const auto free_slot = [&slot](int k, std::int8_t& count) { slot[static_cast<std::size_t>(k)] = 0, --count; };
  const auto read_host = [&](std::size_t c) {
    if (reading[c]) host[static_cast<std::size_t>(at_host[c])] = 0, at_host[c] = -1, reading[c] = 0;
  };
  for (mesh_op& o : ops) {
    o.stash_slot = o.host_slot = -1, o.scratch = false, o.freed_before = o.taken = o.freed_after = 0;
    if (o.code == mesh_op_code::compute) {
      const int ai = ++action_index;
      for (std::size_t q = 0; q < drain_slot.size();) {  // the OFFLOADs this op waits for: their slots are free
        if (drain_until[q] != ai) {
          ++q;
          continue;
        }
        if (slot[static_cast<std::size_t>(drain_slot[q])] == 2)  // (a RELOAD that borrowed it keeps it)
          free_slot(drain_slot[q], o.freed_before);
        drain_slot.erase(drain_slot.begin() + static_cast<std::ptrdiff_t>(q));
        drain_until.erase(drain_until.begin() + static_cast<std::ptrdiff_t>(q));
      }
      const std::size_t c = cell(o.stage, o.microbatch);
      if (o.what == kind::F) {
        if (recomputed[c]) {
          o.scratch = true;
        } else {
          at[c] = take_slot(slot, false, borrowed);
          ++o.taken;
        }
        o.stash_slot = at[c];
        if (forward_only && at[c] >= 0) free_slot(at[c], o.freed_after), at[c] = -1;
      } else {
        o.stash_slot = at[c];
        read_host(c);
      }
      if (held >= 0) free_slot(held, o.freed_after), held = -1;  // an overlapped pair's first half's slot
      if (o.what != kind::F && last_backward[c] == ai && at[c] >= 0) {
        if (o.overlapped)
          held = at[c];
        else
          free_slot(at[c], o.freed_after);
        at[c] = -1;
      }
      continue;
    }
    if (!is_copy(o.code) && o.code != mesh_op_code::recompute) continue;
    if (next >= mine.size() || mine[next].stage != o.stage || mine[next].microbatch != o.microbatch)
      throw std::invalid_argument("pipetype: the mesh step does not hold its memory actions");
    const memory_action& a = mine[next++];
    const std::size_t c = cell(o.stage, o.microbatch);
    if (o.code == mesh_op_code::offload) {
      o.stash_slot = at[c];
      if (recomputed[c]) {  // its stash is rebuilt, not moved: only its input goes to the host, if it moves one
        if (mp.act_count(o) > 0) at_host[c] = o.host_slot = take_slot(host, false, borrowed);
        continue;
      }
      at_host[c] = take_slot(host, false, borrowed);
      o.host_slot = at_host[c];
      if (at[c] >= 0) {
        slot[static_cast<std::size_t>(at[c])] = 2;
        drain_slot.push_back(at[c]), drain_until.push_back(a.until);
      }
      at[c] = -1;
    } else if (o.code == mesh_op_code::reload) {
      if (recomputed[c]) {  // its stash is rebuilt, not moved: the RELOAD brings its input only
        if (at_host[c] >= 0) o.host_slot = at_host[c], reading[c] = 1;  // (freed when its RECOMPUTE reads it)
        continue;
      }
      at[c] = take_slot(slot, true, borrowed);
      o.taken = borrowed ? 0 : 1;
      for (std::size_t q = 0; borrowed && q < drain_slot.size(); ++q)  // the slot is the RELOAD's now: its
        if (drain_slot[q] == at[c]) {  // drain must not free it later, when it may drain for another OFFLOAD
          drain_slot.erase(drain_slot.begin() + static_cast<std::ptrdiff_t>(q));
          drain_until.erase(drain_until.begin() + static_cast<std::ptrdiff_t>(q));
          break;
        }
      o.stash_slot = at[c];
      o.host_slot = at_host[c];
      reading[c] = 1;
    } else {  // a RECOMPUTE: its forward again, into a slot of its own
      at[c] = take_slot(slot, false, borrowed);
      o.taken = 1;
      o.stash_slot = at[c];
      read_host(c);
    }
  }
  mp.stash_slots[static_cast<std::size_t>(g)] = static_cast<int>(slot.size());
  mp.host_slots[static_cast<std::size_t>(g)] = static_cast<int>(host.size());
}

/// Every global rank's (lower_mesh calls it for a step with memory actions).
constexpr void assign_memory_slots(const program_view& p, const memory_program& mem, mesh_program& mp) {
  mp.stash_slots.assign(static_cast<std::size_t>(mp.shape.size()), 0);
  mp.host_slots.assign(static_cast<std::size_t>(mp.shape.size()), 0);
  for (int g = 0; g < mp.shape.size(); ++g) assign_memory_slots(p, mem, mp, g);
}

}  // namespace pipetype::detail
