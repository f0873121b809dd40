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
#include "pipetype/detail/scratch.hpp"

namespace pipetype::detail {

/// Lowest free of `busy[0 .. n)` (growing n when none is free); takes it and returns it.
constexpr int take_lowest(int* busy, int& n) {
  int k = 0;
  while (k < n && busy[k] != 0) ++k;
  if (k == n) ++n;
  busy[k] = 1;
  return k;
}

/// Assigns the stash_slot and weight_grad_slot of the compute ops `ops[b .. e)` (one rank's, in
/// its order) of a program with `stages` stages, `microbatches` microbatches and `lane_length`
/// stages per lane, and writes the counts into `rr`.
constexpr void assign_saved_slots(lowered_op* const ops, int b, int e, int stages, int microbatches, int lane_length,
                                  rank_resources& rr) {
  const int S = stages, m = microbatches, cells = S * m;
  // per (stage, microbatch): the last backward's op, the stash slot; weight grads: the local slot
  scratch<int> t(4 * cells + 3 * S + cells + 1, -1);
  int* const last = t.data();
  int* const stash = last + cells;
  int* const held = stash + cells;  // per cell: its weight-gradient slot, local to the stage
  int* const used = held + cells;   // per cell (stage s's slots at s·m ..): 1 while taken
  int* const count = used + cells;  // per stage: its slots
  int* const next = count + S;      // per stage: the next microbatch to add
  int* const first = next + S;      // per stage: its first rank-wide slot
  int* const busy = first + S;      // the stash pool's slots
  for (int i = 0; i < cells; ++i) used[i] = 0;
  for (int s = 0; s < S; ++s) count[s] = 0, next[s] = 0;
  for (int i = b; i < e; ++i) {
    const lowered_op& o = ops[i];
    if (o.code == op_code::compute && o.what != kind::F) last[o.stage * m + o.microbatch] = i;
  }
  int nstash = 0, pending = -1;  // pending: a slot the first half of an overlapped pair freed
  for (int i = b; i < e; ++i) {
    lowered_op& o = ops[i];
    if (o.code != op_code::compute) continue;
    const int q = o.stage * m + o.microbatch;
    if (o.what == kind::F) stash[q] = take_lowest(busy, nstash);
    o.stash_slot = stash[q];
    if (o.what == kind::F && last[q] < 0) {  // forward-only: no backward reads it
      busy[stash[q]] = 0;
    } else {
      if (pending >= 0) busy[pending] = 0, pending = -1;  // the pair's second half has its slot now
      if (o.what != kind::F && last[q] == i) {
        if (o.overlapped)
          pending = stash[q];
        else
          busy[stash[q]] = 0;
      }
    }
    if (o.what != kind::B && o.what != kind::W) continue;
    const int s = o.stage, base = s * m;
    const int k = take_lowest(used + base, count[s]);
    held[q] = k;
    o.weight_grad_slot = k;          // local for now: made rank-wide below
    if (s >= lane_length) continue;  // a later lane's: held to the step's end
    while (next[s] < m && held[base + next[s]] >= 0) used[base + held[base + next[s]]] = 0, ++next[s];
  }
  int total = 0;
  for (int s = 0; s < S; ++s) first[s] = total, total += count[s];
  for (int i = b; i < e; ++i)
    if (ops[i].weight_grad_slot >= 0) ops[i].weight_grad_slot += first[ops[i].stage];
  rr.stash_slots = nstash;
  rr.weight_grad_slots = total;
}

}  // namespace pipetype::detail
