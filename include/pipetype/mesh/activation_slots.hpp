// pipetype/mesh/activation_slots.hpp — the activation pool of a step with memory actions.
//
// The lowering gives every activation a slot from the op that writes it to its last reader: a
// stage's input stays in its slot until the microbatch's last backward (compile/lower.hpp,
// "Slots"). With memory actions that input moves with its stash (mesh/memory_slots.hpp): the
// OFFLOAD copies it to the host after the stash, and the RELOAD copies it back. lower_mesh runs
// this pass before the stash pass (which gives a host slot to a copy that moves only an input),
// on each global rank's ops in issue order:
//
//   buffers   a recv and a forward's output write one, and a forward, backward, send or
//             RECOMPUTE reads one, as the lowered op's slots say (lowered_op::slot, slots_of). An
//             OFFLOAD reads the inputs of its forward that it moves; a buffer's device life ends
//             there. The RELOAD writes each into a new buffer, which its backwards then read. An
//             input moves when only its own microbatch's forward and backwards read it: not the
//             batch (stage 0 has no input to move), not an output that is also sent, not a fan-out
//             that another consumer reads. A recomputed forward's input moves too (all it saved):
//             its RECOMPUTE reads it where the RELOAD put it
//   slots     each buffer in the order it is first written takes the lowest slot whose previous
//             holder's ops all happen before its writer (mesh/stream_clocks.hpp: the events
//             the step already has, no new ones; on the writer's own stream strictly before, so
//             that a send and a recv of one NCCL group never share a slot; the halves of an
//             overlapped pair may run at once). A slot is free once its holder's last op is known
//             to be done
//
// A step keeps the lowering's own slots (each reference in the slot it had: a moved input comes
// back to the slot it left, which nothing else takes meanwhile) when this plan does not need
// fewer of them. Either way the result is mesh_op::act and mesh_program::act_map (each op's
// references: its lowered slot, the slot of this pool, whether it writes) and, per global rank,
// mesh_program::activation_slots. verify_memory proves it: no slot is written before every op of
// its previous holder, and every reader finds what the lowered program's data flow puts there.
#pragma once

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/mesh/ops.hpp"
#include "pipetype/mesh/stream_clocks.hpp"
#include "pipetype/core/program.hpp"

namespace pipetype::detail {

/// A rank's activation references in issue order, as buffers (see the top of this file), kept
/// flat: a plan that is a type runs this in a constant evaluation, under the compiler's step limit.
struct activation_walk {
  struct ref {
    int op = -1, lowered = -1, buffer = -1;
    bool writes = false;
  };
  std::vector<ref> refs;
  // per buffer: its writer, the one cell whose ops read it (−1 none, −2 several or a send), its
  // latest op's clock on each stream, and its latest compute op
  std::vector<int> writer, sole, last_compute;
  std::vector<stream_clock> last;
  // per cell (stage · M + microbatch): its forward's inputs at in_slots[in_at, in_at + in_n), each
  // with its buffer then and whether its OFFLOAD and RELOAD move it
  std::vector<int> in_at, in_n, in_slots, in_buffer;
  std::vector<char> in_moves;
};

/// Walks global rank g of `mp` (lowered from `p` as `l`, its ops' clocks `clock`). `moves`: per
/// forward input in walk order, whether its OFFLOAD and RELOAD move it (empty: none moves). A
/// walk that only asks which inputs may move (`readers_only`) keeps only the buffers' readers.
constexpr activation_walk walk_activations(const program_view& p, const lowered_view& l, const mesh_program& mp, int g,
                                           const std::vector<stream_clock>& clock, const std::vector<char>& moves,
                                           bool readers_only = false) {
  const int r = mp.shape.pipeline_rank(g);
  const op_span low = l.rank_ops(r);
  const std::span<const mesh_op> ops = mp.rank_ops(g);
  const auto M = static_cast<std::size_t>(p.microbatches);
  const std::size_t cells = static_cast<std::size_t>(p.stages) * M;
  const auto cell_of = [&](const mesh_op& o) {
    return o.stage >= 0 && o.stage < p.stages && o.microbatch >= 0 && o.microbatch < p.microbatches
               ? static_cast<int>(static_cast<std::size_t>(o.stage) * M + static_cast<std::size_t>(o.microbatch))
               : -1;
  };
  activation_walk w;
  w.in_at.assign(cells, 0);
  w.in_n.assign(cells, 0);
  if (!readers_only) w.refs.reserve(2 * ops.size()), w.last_compute.reserve(ops.size()), w.last.reserve(ops.size());
  w.writer.reserve(ops.size()), w.sole.reserve(ops.size());
  std::vector<int> cur(static_cast<std::size_t>(l.resources[static_cast<std::size_t>(r)].activation_slots), -1);
  auto bad = [&](int i, const char* why) {
    return std::invalid_argument("pipetype::lower_mesh: rank " + std::to_string(g) + ", op " + std::to_string(i) +
                                 ": " + why);
  };
  auto touch = [&](int b, int i) {  // op i uses buffer b: its latest op on i's stream
    const mesh_op& o = ops[static_cast<std::size_t>(i)];
    const auto s = static_cast<std::size_t>(o.stream);
    stream_clock& at = w.last[static_cast<std::size_t>(b)];
    at[s] = std::max(at[s], clock[static_cast<std::size_t>(i)][s]);
    if (o.code == mesh_op_code::compute) w.last_compute[static_cast<std::size_t>(b)] = i;
  };
  auto write = [&](int i, int k) {
    if (k < 0 || static_cast<std::size_t>(k) >= cur.size()) throw bad(i, "an activation slot past the lowered pool");
    const int b = static_cast<int>(w.writer.size());
    cur[static_cast<std::size_t>(k)] = b;
    w.writer.push_back(i), w.sole.push_back(-1);
    if (readers_only) return;
    w.refs.push_back({i, k, b, true});
    w.last_compute.push_back(-1), w.last.push_back(stream_clock{});
    touch(b, i);
  };
  auto read = [&](int i, int k, int c) {
    if (k < 0 || static_cast<std::size_t>(k) >= cur.size() || cur[static_cast<std::size_t>(k)] < 0)
      throw bad(i, "an op reads an activation slot that holds nothing");
    const int b = cur[static_cast<std::size_t>(k)];
    int& s = w.sole[static_cast<std::size_t>(b)];
    s = c < 0 || s == -2 || (s >= 0 && s != c) ? -2 : c;
    if (readers_only) return;
    w.refs.push_back({i, k, b, false});
    touch(b, i);
  };
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    const mesh_op& o = ops[static_cast<std::size_t>(i)];
    const int c = cell_of(o);
    if (o.source >= 0) {
      const lowered_op& x = low[static_cast<std::size_t>(o.source)];
      if (x.code == op_code::recv && x.what == kind::F) {
        write(i, x.slot);
      } else if (x.code == op_code::send && x.what == kind::F) {
        read(i, x.slot, -1);
      } else if (x.code == op_code::compute) {
        const op_slots sl = l.slots_of(x);
        for (const int k : sl.in) read(i, k, c);
        if (x.what != kind::F) continue;
        if (c >= 0) {  // its inputs, for its copies and its RECOMPUTE
          w.in_at[static_cast<std::size_t>(c)] = static_cast<int>(w.in_slots.size());
          w.in_n[static_cast<std::size_t>(c)] = static_cast<int>(sl.in.size());
          for (const int k : sl.in) w.in_slots.push_back(k), w.in_buffer.push_back(cur[static_cast<std::size_t>(k)]);
        }
        for (const int k : sl.out) write(i, k);
      }
      continue;
    }
    if (c < 0) continue;
    const auto cc = static_cast<std::size_t>(c);
    const auto first = static_cast<std::size_t>(w.in_at[cc]), n = static_cast<std::size_t>(w.in_n[cc]);
    if (o.code == mesh_op_code::recompute) {  // its forward again, from the input it kept
      for (std::size_t q = first; q < first + n; ++q) read(i, w.in_slots[q], c);
    } else if (is_copy(o.code)) {
      for (std::size_t q = first; q < first + n && q < moves.size(); ++q) {
        if (!moves[q]) continue;
        const int k = w.in_slots[q];
        if (o.code == mesh_op_code::offload)
          read(i, k, c), cur[static_cast<std::size_t>(k)] = -1;  // on the host until its RELOAD
        else
          write(i, k);
      }
    }
  }
  return w;
}

/// Per forward input of global rank g (in `still`'s walk order), whether its OFFLOAD moves it: an
/// OFFLOAD's forward's input that only its own microbatch's ops read (see the top of this file).
constexpr std::vector<char> moved_inputs(const program_view& p, const mesh_program& mp, int g,
                                         const activation_walk& still) {
  const auto M = static_cast<std::size_t>(p.microbatches);
  std::vector<char> offloaded(still.in_at.size(), 0), moves(still.in_slots.size(), 0);
  for (const mesh_op& o : mp.rank_ops(g))
    if (o.code == mesh_op_code::offload && o.stage >= 0 && o.stage < p.stages && o.microbatch >= 0 &&
        o.microbatch < p.microbatches)
      offloaded[static_cast<std::size_t>(o.stage) * M + static_cast<std::size_t>(o.microbatch)] = 1;
  for (std::size_t c = 0; c < offloaded.size(); ++c) {
    if (!offloaded[c]) continue;
    const auto first = static_cast<std::size_t>(still.in_at[c]), n = static_cast<std::size_t>(still.in_n[c]);
    for (std::size_t q = first; q < first + n; ++q)
      moves[q] =
          still.in_buffer[q] >= 0 && still.sole[static_cast<std::size_t>(still.in_buffer[q])] == static_cast<int>(c);
  }
  return moves;
}

/// Assigns global rank g's activation slots in `mp` (lowered from `p` as `l`; see the top of this file).
constexpr void assign_activation_slots(const program_view& p, const lowered_view& l, mesh_program& mp, int g) {
  const std::vector<stream_clock> clock = rank_clocks(mp, g);
  const activation_walk w =
      walk_activations(p, l, mp, g, clock, moved_inputs(p, mp, g, walk_activations(p, l, mp, g, clock, {}, true)));
  const std::span<const mesh_op> ops = mp.rank_ops(g);
  const std::size_t nb = w.writer.size();
  std::vector<int> slot_of(nb, -1), holder;
  for (std::size_t b = 0; b < nb; ++b) {
    const int wr = w.writer[b];
    const stream_clock& at = clock[static_cast<std::size_t>(wr)];
    const auto own = static_cast<std::size_t>(ops[static_cast<std::size_t>(wr)].stream);
    // the first half of the overlapped pair whose second half `wr` is (they may run at once)
    int pair_first = -1;
    if (ops[static_cast<std::size_t>(wr)].code == mesh_op_code::compute)
      for (int i = wr - 1; i >= 0; --i)
        if (ops[static_cast<std::size_t>(i)].code == mesh_op_code::compute) {
          pair_first = ops[static_cast<std::size_t>(i)].overlapped ? i : -1;
          break;
        }
    auto free_for = [&](int h) {
      if (h < 0) return true;
      const stream_clock& done = w.last[static_cast<std::size_t>(h)];
      for (std::size_t s = 0; s < done.size(); ++s)
        if (s == own ? done[s] >= at[s] : done[s] > at[s]) return false;
      return pair_first < 0 || w.last_compute[static_cast<std::size_t>(h)] != pair_first;
    };
    std::size_t n = 0;
    while (n < holder.size() && !free_for(holder[n])) ++n;
    if (n == holder.size()) holder.push_back(-1);
    holder[n] = static_cast<int>(b);
    slot_of[b] = static_cast<int>(n);
  }
  const auto gi = static_cast<std::size_t>(g);
  const int lowered = l.resources[static_cast<std::size_t>(mp.shape.pipeline_rank(g))].activation_slots;
  const bool replan = static_cast<int>(holder.size()) < lowered;
  mp.activation_slots[gi] = replan ? static_cast<int>(holder.size()) : lowered;
  const auto b0 = static_cast<std::size_t>(mp.begin[gi]);
  mp.act_map.reserve(mp.act_map.size() + 4 * w.refs.size());
  for (std::size_t k = 0; k < w.refs.size();) {  // each op's references, together
    const int i = w.refs[k].op;
    mesh_op& o = mp.ops[b0 + static_cast<std::size_t>(i)];
    o.act = static_cast<int>(mp.act_map.size());
    mp.act_map.push_back(0);
    for (; k < w.refs.size() && w.refs[k].op == i; ++k) {
      const activation_walk::ref& x = w.refs[k];
      ++mp.act_map[static_cast<std::size_t>(o.act)];
      mp.act_map.push_back(x.lowered);
      mp.act_map.push_back(replan ? slot_of[static_cast<std::size_t>(x.buffer)] : x.lowered);
      mp.act_map.push_back(x.writes ? 1 : 0);
    }
  }
}

/// Every global rank's (lower_mesh calls it for a step with memory actions, before the stash pass).
constexpr void assign_activation_slots(const program_view& p, const lowered_view& l, mesh_program& mp) {
  mp.activation_slots.assign(static_cast<std::size_t>(mp.shape.size()), 0);
  mp.act_map.clear();
  for (int g = 0; g < mp.shape.size(); ++g) assign_activation_slots(p, l, mp, g);
}

}  // namespace pipetype::detail
