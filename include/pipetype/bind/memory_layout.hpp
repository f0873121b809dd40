// pipetype/bind/memory_layout.hpp — the stash pool of a step with memory actions, and its host pool.
//
// What a stage saves for its backward besides its input is its stash (stage_entry::stash_bytes);
// the input stays in the activation slot the lowering gave it until the last backward. With
// memory actions (compile/memory_actions.hpp) the stash is what moves: an OFFLOAD copies a
// microbatch's stash to a host slot, a RELOAD copies it back into a device slot, and a forward
// that will be recomputed writes its stash to a scratch block that no one reads (its RECOMPUTE
// writes it again into a slot of its own before the backward). So the executors run a step with
// memory actions with the sizes memory_sizes{stash bytes per stage, kept 0}, and this layout is
// memory_of's accounting turned into slots, walking the rank's ops in the mesh program's order:
//
//   device slots   taken by a forward (not a recomputed one), a RELOAD and a RECOMPUTE, lowest
//                  free first; freed after the last backward of the microbatch on the rank (a slot
//                  the first half of an overlapped pair frees stays taken through the second) and
//                  at an OFFLOAD's `until` — the compute op that waits for the copy. Until then
//                  only a RELOAD may take it (the copy stream runs its copies in order, so the
//                  OFFLOAD has completed when the RELOAD starts)
//   host slots     taken by an OFFLOAD, freed when the backward or RECOMPUTE that reads the
//                  RELOADed stash runs (the RELOAD has completed then)
//
// Every reuse is after the op that last touched the slot in happens-before (verify_memory proves
// the waits this relies on), so the pool's slot count is the step's peak in stash slots.
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
/// model's stages `entries` (plan stage s runs entries[s % entries.size()]). Throws
/// std::invalid_argument when `mp` does not hold `mem`'s actions for the rank.
inline memory_layout memory_layout_of(const program_view& p, const memory_program& mem, const mesh_program& mp, int g,
                                      const std::vector<stage_entry>& entries) {
  const int r = mp.shape.pipeline_rank(g);
  const std::span<const mesh_op> ops = mp.rank_ops(g);
  const std::span<const action> acts = p.rank_actions(r);
  const std::span<const memory_action> mine = mem.rank_ops(r);
  const auto M = static_cast<std::size_t>(p.microbatches);
  const auto cell = [&](int s, int j) { return static_cast<std::size_t>(s) * M + static_cast<std::size_t>(j); };
  const std::size_t cells = static_cast<std::size_t>(p.stages) * M;
  memory_layout out;
  std::size_t largest = 0;
  for (const action& a : acts)
    largest = std::max(largest, entries[static_cast<std::size_t>(a.stage) % entries.size()].stash_bytes());
  out.stride = round_up64(largest);
  out.device.assign(ops.size(), -1);
  out.host.assign(ops.size(), -1);
  out.scratch.assign(ops.size(), 0);
  out.freed_before.assign(ops.size(), 0);
  out.taken.assign(ops.size(), 0);
  out.freed_after.assign(ops.size(), 0);
  // per (stage, microbatch): its last backward's action index, whether it is recomputed
  std::vector<int> last_backward(cells, -1);
  std::vector<char> recomputed(cells, 0);
  for (int i = 0; i < static_cast<int>(acts.size()); ++i)
    if (acts[static_cast<std::size_t>(i)].what != kind::F)
      last_backward[cell(acts[static_cast<std::size_t>(i)].stage, acts[static_cast<std::size_t>(i)].microbatch)] = i;
  for (const memory_action& a : mine)
    if (a.what == memory_kind::recompute) recomputed[cell(a.stage, a.microbatch)] = 1;
  const bool forward_only = is_forward_only(p);
  // slot states: 0 free, 1 taken, 2 draining (an OFFLOAD copies out of it until its `until`)
  std::vector<char> slot, host;
  bool borrowed = false;  // the last take() took a draining slot (still counted as in use)
  auto take = [&borrowed](std::vector<char>& pool, bool draining_too) {
    std::size_t k = 0;
    while (k < pool.size() && !(pool[k] == 0 || (draining_too && pool[k] == 2))) ++k;
    if (k == pool.size()) pool.push_back(0);
    borrowed = pool[k] == 2;
    pool[k] = 1;
    return static_cast<int>(k);
  };
  std::vector<int> at(cells, -1), at_host(cells, -1);  // a microbatch's device and host slots
  std::vector<char> reading(cells, 0);                 // reloaded: its host slot is freed at its first read
  struct draining {
    int slot = -1, until = -1;
  };
  std::vector<draining> pending;
  std::size_t next = 0;  // the next memory action
  int action_index = -1, held = -1;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const mesh_op& o = ops[i];
    if (o.code == mesh_op_code::compute) {
      const int ai = ++action_index;
      for (std::size_t q = 0; q < pending.size();) {  // the OFFLOADs this op waits for: their slots are free
        if (pending[q].until != ai) {
          ++q;
          continue;
        }
        if (slot[static_cast<std::size_t>(pending[q].slot)] == 2)  // (a RELOAD that borrowed it keeps it)
          slot[static_cast<std::size_t>(pending[q].slot)] = 0, --out.freed_before[i];
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(q));
      }
      const std::size_t c = cell(o.stage, o.microbatch);
      if (o.what == kind::F) {
        if (recomputed[c]) {
          out.scratch[i] = 1;
        } else {
          at[c] = take(slot, false);
          ++out.taken[i];
        }
        out.device[i] = at[c];
        if (forward_only && at[c] >= 0) slot[static_cast<std::size_t>(at[c])] = 0, --out.freed_after[i], at[c] = -1;
      } else {
        out.device[i] = at[c];
        if (reading[c]) host[static_cast<std::size_t>(at_host[c])] = 0, at_host[c] = -1, reading[c] = 0;
      }
      if (held >= 0) {  // the second half of an overlapped pair: the first's freed slot goes now
        slot[static_cast<std::size_t>(held)] = 0, --out.freed_after[i];
        held = -1;
      }
      if (o.what != kind::F && last_backward[c] == ai && at[c] >= 0) {
        if (o.overlapped)
          held = at[c];
        else
          slot[static_cast<std::size_t>(at[c])] = 0, --out.freed_after[i];
        at[c] = -1;
      }
      continue;
    }
    if (!is_copy(o.code) && o.code != mesh_op_code::recompute) continue;
    if (next >= mine.size() || mine[next].stage != o.stage || mine[next].microbatch != o.microbatch)
      throw std::invalid_argument("pipetype: the mesh step does not hold the memory actions it was bound with");
    const memory_action& a = mine[next++];
    const std::size_t c = cell(o.stage, o.microbatch);
    if (o.code == mesh_op_code::offload) {
      out.device[i] = at[c];
      at_host[c] = take(host, false);
      out.host[i] = at_host[c];
      if (at[c] >= 0) {
        slot[static_cast<std::size_t>(at[c])] = 2;
        pending.push_back({at[c], a.until});
      }
      at[c] = -1;
    } else if (o.code == mesh_op_code::reload) {
      if (recomputed[c]) continue;  // its stash is rebuilt, not moved: the RELOAD brings its input only
      at[c] = take(slot, true);
      out.taken[i] += borrowed ? 0 : 1;
      out.device[i] = at[c];
      out.host[i] = at_host[c];
      reading[c] = 1;
    } else {  // a RECOMPUTE: its forward again, into a slot of its own
      at[c] = take(slot, false);
      ++out.taken[i];
      out.device[i] = at[c];
      if (reading[c]) host[static_cast<std::size_t>(at_host[c])] = 0, at_host[c] = -1, reading[c] = 0;
    }
  }
  out.device_slots = static_cast<int>(slot.size());
  out.host_slots = static_cast<int>(host.size());
  return out;
}

}  // namespace pipetype::detail
