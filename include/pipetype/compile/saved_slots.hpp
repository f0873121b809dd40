// pipetype/compile/saved_slots.hpp — the lowering's last pass: each compute op's stash slot and
// weight-gradient slot, and each rank's count of both.
//
// What a stage saves for its backward besides its input (its stash) and the weight gradient a
// backward hands to pipetype (stage_entry::weight_grad) live in two more pools per rank, next to
// the activation and gradient pools the lowering already assigns. Their slots are small integers
// of the lowered program like the others, so a rank's whole buffer plan is a constant of the
// plan: rank_resources::stash_slots and ::weight_grad_slots can be `static_assert`ed, and the
// bind layer only multiplies them by the stages' sizes.
//
//   stash slots    taken by F(s, j), lowest free first; read by every backward of (s, j) on the
//                  rank; free after the last of them (a forward-only program frees it after the
//                  F). A slot the first half of an overlapped pair frees stays taken through the
//                  second half: the halves may run at once on a device.
//   weight grads   one pool per stage, the stages' pools side by side in stage order (slot
//                  numbers are rank-wide, a stage's contiguous): each B or W of (s, j) writes a
//                  slot, lowest free first; the gradients are added in microbatch order, so a slot
//                  is free again once its microbatch and every earlier one of the stage have
//                  written theirs. A later lane's (DualPipe's second direction) are held to the
//                  step's end and added after it, in microbatch order: never freed.
//
// The counts do not depend on the stages' sizes: a stage with no stash or no weight gradient
// gets slots of zero bytes. Run on each rank's ops once they are emitted, at run time and inside
// make_plan (one walk of the ops, so it costs the constant evaluator little).
#pragma once

#include "pipetype/compile/lowered.hpp"
#include "pipetype/detail/heap.hpp"
#include "pipetype/detail/scratch.hpp"

namespace pipetype::detail {

/// Assigns the stash_slot and weight_grad_slot of the compute ops `ops[b .. e)` (one rank's, in
/// its order) of a program with `stages` stages, `microbatches` microbatches and `lane_length`
/// stages per lane, and writes the counts into `rr`. O(n log n) in the rank's ops, and its
/// tables hold only the rank's own stages.
constexpr void assign_saved_slots(lowered_op* const ops, int b, int e, int stages, int microbatches, int lane_length,
                                  rank_resources& rr) {
  const int S = stages, m = microbatches;
  scratch<int> local(S, -1);  // per stage: its index among the rank's stages (in stage order), or -1
  for (int i = b; i < e; ++i)
    if (ops[i].code == op_code::compute) local[ops[i].stage] = 0;
  int L = 0;
  for (int s = 0; s < S; ++s)
    if (local[s] == 0) local[s] = L++;
  const int cells = L * m;  // per (local stage, microbatch)
  // the last backward's op, the stash slot, the weight-gradient slot (local to the stage); then
  // the free heaps: the stash pool's, and each stage's weight-gradient pool's at its own m cells
  scratch<int> t(5 * cells + 3 * L + 1, unset);
  pieces<int> at{t.data()};
  int* const last = at.next(cells);
  int* const stash = at.next(cells);
  int* const held = at.next(cells);
  int* const stash_free = at.next(cells);
  int* const grad_free = at.next(cells);
  int* const nfree = at.next(L);  // per stage: its freed weight-gradient slots
  int* const count = at.next(L);  // per stage: its weight-gradient slots
  int* const next = at.next(L);   // per stage: the next microbatch to add
  for (int i = 0; i < cells; ++i) last[i] = -1, held[i] = -1;
  for (int l = 0; l < L; ++l) nfree[l] = 0, count[l] = 0, next[l] = 0;
  for (int i = b; i < e; ++i) {
    const lowered_op& o = ops[i];
    if (o.code == op_code::compute && o.what != kind::F) last[local[o.stage] * m + o.microbatch] = i;
  }
  lowest_free pool{stash_free};
  int pending = -1;  // a slot the first half of an overlapped pair freed
  for (int i = b; i < e; ++i) {
    lowered_op& o = ops[i];
    if (o.code != op_code::compute) continue;
    const int l = local[o.stage], q = l * m + o.microbatch;
    if (o.what == kind::F) stash[q] = pool.take();
    o.stash_slot = stash[q];
    if (o.what == kind::F && last[q] < 0) {  // forward-only: no backward reads it
      pool.give(stash[q]);
    } else {
      if (pending >= 0) pool.give(pending), pending = -1;  // the pair's second half has its slot now
      if (o.what != kind::F && last[q] == i) {
        if (o.overlapped)
          pending = stash[q];
        else
          pool.give(stash[q]);
      }
    }
    if (o.what != kind::B && o.what != kind::W) continue;
    const int base = l * m;
    lowest_free grads{grad_free + base, nfree[l], count[l]};
    const int k = grads.take();
    held[q] = k;
    o.weight_grad_slot = k;                // local for now: made rank-wide below
    if (o.stage < lane_length)             // a later lane's is held to the step's end
      while (next[l] < m && held[base + next[l]] >= 0) grads.give(held[base + next[l]]), ++next[l];
    nfree[l] = grads.nfree, count[l] = grads.slots;
  }
  int total = 0;
  for (int l = 0; l < L; ++l) next[l] = total, total += count[l];  // next: now each stage's first slot
  for (int i = b; i < e; ++i)
    if (ops[i].weight_grad_slot >= 0) ops[i].weight_grad_slot += next[local[ops[i].stage]];
  rr.stash_slots = pool.slots;
  rr.weight_grad_slots = total;
}

}  // namespace pipetype::detail
