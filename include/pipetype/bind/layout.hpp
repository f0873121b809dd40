// pipetype/bind/layout.hpp — where a rank's buffers go: slot strides, weight-gradient offsets
// and the order their sums are made in.
//
//   pools per rank   activations, gradients, stashes and weight gradients: the lowering's slots
//                    (compile/saved_slots.hpp) times the stages' sizes, as pools_of counts them
//                    (compile/pool_bytes.hpp), so a plan that is a type has the same bytes
//   two lanes (DualPipe): the plan's stage k·L + i runs the model's stage i on another rank, so
//   one stage object serves two ranks at once — its forward/backward must write only through
//   their contexts, and it must hand its weight gradients to pipetype (weight_grad): lane 0's
//   are added in microbatch order during the step, the later lanes' are held and added after
//   it, in microbatch order, so the sum is the unpipelined one bit for bit.
//
// The layout is plain data (offsets, slot numbers per op); an executor maps it onto memory it
// owns (host: aligned heap blocks; device: the driver's allocations) and binds each op with
// `bind_compute`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetype/bind/stage_entry.hpp"
#include "pipetype/compile/lowered.hpp"
#include "pipetype/compile/plan.hpp"
#include "pipetype/compile/pool_bytes.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/io/text.hpp"

namespace pipetype {

/// The lowered and compute views of a plan (compile-time or run-time).
struct plan_views {
  program_view compute;
  lowered_view lowered;
};
template <plan_shape Z>
constexpr plan_views views_of(const static_plan<Z>& p) {
  return {p.compute(), p.lowered()};
}
inline plan_views views_of(const runtime_plan& p) {
  if (!p.ok()) throw std::invalid_argument("pipetype: the plan was rejected: " + describe(p.result));
  return {p.compute(), p.lowered()};
}

namespace detail {

inline std::string action_name(const lowered_op& o) { return to_text(action{o.what, o.stage, o.microbatch, false}); }

/// The plan stage whose shape sizes transfer op `o` on its own rank: the stage there that made
/// the data (a send: an activation's producer, a gradient's consumer, whose backward made it) or
/// reads it (a receive: an activation's consumer, a gradient's producer). Its block is the
/// stage's output when o sends an activation or receives a gradient, else its input
/// (transfer_bytes): the same bytes as the other end's when the edge fits, and a model part
/// (bind/part.hpp) holds this one.
inline int transfer_stage(const program_view& p, const lowered_op& o) {
  if (o.code == op_code::send) return o.stage;
  const bool act = o.what == kind::F;
  if (p.has_edges()) {
    const stage_edge& e = p.edges[static_cast<std::size_t>(o.link)];
    return act ? e.to : e.from;
  }
  return act ? o.stage + 1 : o.stage - 1;
}
/// The bytes transfer op `o` moves at full length, from its transfer_stage's entry `e` (`k`: its
/// transfer_edge_input).
inline std::size_t full_transfer_bytes(const lowered_op& o, const stage_entry& e, int k = 0) {
  return transfer_bytes_of(transfer_block(e, o.what, o.code, k), o.what);
}

/// A bound stage's sizes as the plan's pools count them (compile/pool_bytes.hpp): its weight
/// gradient only when it hands one to pipetype.
inline stage_bytes bytes_of(const stage_entry& e) {
  stage_bytes z{e.in.bytes, e.out.bytes, e.in.grad_bytes, e.out.grad_bytes,
                0,          0,           e.stash_bytes(), e.add != nullptr ? e.weight_grad_bytes() : 0};
  for (const edge_shape& x : e.in_edges)
    z.edge_input = std::max(z.edge_input, x.bytes), z.edge_input_grad = std::max(z.edge_input_grad, x.grad_bytes);
  return z;
}
inline std::vector<stage_bytes> bytes_of(const std::vector<stage_entry>& entries) {
  std::vector<stage_bytes> out;
  out.reserve(entries.size());
  for (const stage_entry& e : entries) out.push_back(bytes_of(e));
  return out;
}

/// One rank's pools for the bound stages `entries`: its slot strides and pool bytes. The slots
/// themselves are the lowering's (lowered_op::slot, grad_slot, out_slot, stash_slot;
/// rank_resources counts them), and so are the bytes: the same pools_of a plan that is a type
/// answers at compile time.
inline rank_pools layout_of(const program_view& p, op_span ops, const rank_resources& res,
                            const std::vector<stage_entry>& entries) {
  return pools_of(p, ops, res, bytes_of(entries));
}

/// One rank's weight gradients handed to pipetype (stages with a weight_grad), in the slots the
/// lowering gave each B/W (lowered_op::weight_grad_slot): after a B/W, the held ones that are
/// next in microbatch order are added, so out-of-order backwards still add in order. A later
/// lane's (DualPipe's second direction) are held to the end of the step and added after it.
struct weight_grad_plan {
  struct held {
    int stage = -1, microbatch = -1, slot = -1;
  };
  std::vector<int> slot;               // per op: the slot its B/W writes; -1: none
  std::vector<std::vector<int>> adds;  // per op: the slots added after it, in microbatch order
  std::vector<std::size_t> offset;     // per slot: its byte offset in the rank's pool
  std::size_t bytes = 0;               // the pool
  std::vector<held> later;             // later lanes' slots, in op order
};

inline weight_grad_plan plan_weight_grads(op_span ops, const rank_resources& res,
                                          const std::vector<stage_entry>& entries) {
  const std::size_t L = entries.size();
  weight_grad_plan out;
  out.slot.assign(ops.size(), -1);
  out.adds.resize(ops.size());
  int stages = 0, microbatches = 0;
  for (const lowered_op& o : ops)
    if (o.code == op_code::compute) {
      stages = std::max(stages, o.stage + 1);
      microbatches = std::max(microbatches, o.microbatch + 1);
      if (o.weight_grad_slot >= res.weight_grad_slots)
        throw std::logic_error("pipetype: a weight-gradient slot past the rank's count");
    }
  // the stages' pools side by side; zero bytes where nothing is handed over (compile/pool_bytes.hpp)
  out.offset.assign(static_cast<std::size_t>(res.weight_grad_slots), 0);
  out.bytes = weight_grad_offsets(ops, res, bytes_of(entries), out.offset.data());
  const auto m = static_cast<std::size_t>(microbatches);
  std::vector<int> held(static_cast<std::size_t>(stages) * m, -1);  // (stage, microbatch) → slot
  std::vector<std::size_t> next(static_cast<std::size_t>(stages), 0);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const lowered_op& o = ops[i];
    if (o.code != op_code::compute || o.weight_grad_slot < 0) continue;
    const auto s = static_cast<std::size_t>(o.stage);
    if (entries[s % L].add == nullptr) continue;
    out.slot[i] = o.weight_grad_slot;
    if (s >= L) {  // a later lane's: added after the step
      out.later.push_back({o.stage, o.microbatch, o.weight_grad_slot});
      continue;
    }
    held[s * m + static_cast<std::size_t>(o.microbatch)] = o.weight_grad_slot;
    while (next[s] < m && held[s * m + next[s]] >= 0) out.adds[i].push_back(held[s * m + next[s]++]);
  }
  return out;
}

/// Later lanes' held weight gradients in the order they are added after a step: per model
/// stage, chain by chain, in microbatch order. `H` has stage and microbatch.
template <class H>
void sort_later(std::vector<H>& later, int L) {
  std::stable_sort(later.begin(), later.end(), [L](const H& x, const H& y) {
    // (plain ints: clang reads `x.stage <` as the start of the concept pipetype::stage's arguments)
    const int sx = x.stage, sy = y.stage, lx = sx % L, ly = sy % L;
    return lx != ly ? lx < ly : sx != sy ? sx < sy : x.microbatch < y.microbatch;
  });
}

/// Where the sources read the batch. The step's feed lists every source's tensors (sources in
/// stage order, each source's in declaration order); `first[s]` is source s's first (-1: not a
/// source). A batch given as one array (step(span)) holds one row per microbatch with each
/// source's input block side by side, in stage order: `offset[s]` is source s's block in the row,
/// `row` the row's bytes (a chain of single tensors: stage 0's input alone, as before).
///
/// The sinks (a chain's last stage, a graph's losses: no consumer sends them a gradient, so local
/// learning's stages with detached edges out are sinks too) write one loss per
/// microbatch, sink by sink in stage order (`sink[s]`), and read their targets from the feed's
/// target tensors, sinks in stage order, each sink's in declaration order (`target_first[s]`).
struct batch_layout {
  std::vector<int> first;           // per model stage: its first tensor in the feed; -1: not a source
  std::vector<std::size_t> offset;  // per model stage: its input block's bytes into the row (sources)
  std::vector<int> sink;            // per model stage: its index among the sinks; -1: not a sink
  std::vector<int> target_first;    // per model stage: its first target tensor; -1: none
  std::size_t row = 0;              // bytes per microbatch
  int sources = 0, tensors = 0, sinks = 0, targets = 0;
};
inline batch_layout batch_layout_of(const program_view& p, const std::vector<stage_entry>& entries) {
  batch_layout b;
  b.first.assign(entries.size(), -1);
  b.offset.assign(entries.size(), 0);
  b.sink.assign(entries.size(), -1);
  b.target_first.assign(entries.size(), -1);
  for (std::size_t s = 0; s < entries.size(); ++s) {
    if (entries[s].obj == nullptr) continue;  // a stage another rank holds (a model part)
    if (p.lane_head(static_cast<int>(s))) {
      b.first[s] = b.tensors;
      b.tensors += entries[s].in.count;
      b.offset[s] = b.row;
      b.row += entries[s].in.bytes;
      ++b.sources;
    }
    if (p.loss(static_cast<int>(s))) {  // (its outputs may still travel over detached edges)
      b.sink[s] = b.sinks++;  // (the sinks this rank holds)
      if (entries[s].target.count > 0) {
        b.target_first[s] = b.targets;
        b.targets += entries[s].target.count;
      }
    }
  }
  return b;
}

/// Where the sinks' outputs are kept (binding_options::keep_outputs): sink k's output of
/// microbatch j at (k · microbatches + j) · stride bytes into one block, the stride the largest
/// held sink's output block. A sink's output is otherwise nobody's, and not written. (A loss of
/// local learning whose output travels on over a detached edge is refused with keep_outputs.)
struct output_layout {
  std::size_t stride = 0, bytes = 0;
  std::size_t at(int sink, int microbatch, int microbatches) const {
    return (static_cast<std::size_t>(sink) * static_cast<std::size_t>(microbatches) +
            static_cast<std::size_t>(microbatch)) *
           stride;
  }
};
inline output_layout output_layout_of(const batch_layout& b, const std::vector<stage_entry>& entries,
                                      int microbatches) {
  output_layout o;
  for (std::size_t s = 0; s < entries.size(); ++s)
    if (b.sink[s] >= 0) o.stride = std::max(o.stride, round_up64(entries[s].out.bytes));
  o.bytes = o.stride * static_cast<std::size_t>(b.sinks) * static_cast<std::size_t>(microbatches);
  return o;
}

/// The feed of a batch given as one array (batch_layout's rows): per source tensor, its place.
inline void feed_from_rows(const batch_layout& b, const std::vector<stage_entry>& entries, const std::byte* batch,
                           std::vector<feed_tensor>& out) {
  out.resize(static_cast<std::size_t>(b.tensors));
  for (std::size_t s = 0; s < entries.size(); ++s) {
    if (b.first[s] < 0) continue;
    const edge_shape& sh = entries[s].in;
    for (int k = 0; k < sh.count; ++k)
      out[static_cast<std::size_t>(b.first[s] + k)] = {batch + b.offset[s] + sh.t[static_cast<std::size_t>(k)].offset,
                                                       b.row};
  }
}

/// The addresses a rank's compute ops list (a stage graph's fan-ins and fan-outs): the size of
/// the pool bind_compute fills, reserved once so that its addresses stay put.
inline std::size_t list_pool_size(const lowered_view& l, op_span ops) {
  std::size_t n = 0;
  for (const lowered_op& o : ops)
    if (o.code == op_code::compute && o.link >= 0) {
      const op_slots sl = l.slots_of(o);
      n += sl.in.size() + sl.grad.size() + sl.out.size();
    }
  return n;
}

/// The stage call of a compute op: what it runs and the buffers it reads and writes, given the
/// rank's activation and gradient slot addresses and its stash (nullptr: none). An op of a stage
/// graph with several inputs or consumers lists their addresses in edge order in `lists`
/// (reserved to list_pool_size first).
template <class ActAt, class GradAt>
void bind_compute(bound_op& b, const lowered_op& o, const stage_entry& e, int L, ActAt act_at, GradAt grad_at,
                  std::byte* stash, const lowered_view& l, const batch_layout& batch, std::vector<std::byte*>& lists) {
  b.code = o.code;
  b.what = o.what;
  b.stage = o.stage % L;  // what the stage sees in its context
  b.plan_stage = o.stage;
  b.microbatch = o.microbatch;
  b.fn = e.fn[static_cast<int>(o.what)];
  b.obj = e.obj;
  b.entry = &e;
  b.in = act_at(o.slot);
  if (o.what == kind::F) {
    b.out = act_at(o.out_slot);
  } else {
    b.grad_out = grad_at(o.grad_slot);
    b.grad_in = grad_at(o.out_slot);
  }
  b.stash = stash;
  const auto model_stage = static_cast<std::size_t>(o.stage % L);
  b.feed = batch.first[model_stage];
  b.sink = batch.sink[model_stage];
  b.target = batch.target_first[model_stage];
  if (o.link < 0) return;
  const op_slots sl = l.slots_of(o);
  if (lists.size() + sl.in.size() + sl.grad.size() + sl.out.size() > lists.capacity())
    throw std::logic_error("pipetype: the list pool is smaller than list_pool_size");
  auto list = [&lists](std::span<const int> slots, auto at) {
    std::byte* const* first = lists.data() + lists.size();
    for (const int x : slots) lists.push_back(at(x));
    return first;
  };
  b.in = sl.in.empty() ? nullptr : act_at(sl.in[0]);  // none: a source, which reads the batch
  if (sl.in.size() > 1) {
    b.n_inputs = static_cast<int>(sl.in.size());
    b.in_list = list(sl.in, act_at);
  }
  if (o.what == kind::F) {
    b.out = sl.out.empty() ? nullptr : act_at(sl.out[0]);
    return;
  }
  b.grad_out = sl.grad.empty() ? nullptr : grad_at(sl.grad[0]);
  if (sl.grad.size() > 1) {
    b.n_grad_outs = static_cast<int>(sl.grad.size());
    b.grad_out_list = list(sl.grad, grad_at);
  }
  b.grad_in = sl.out.empty() ? nullptr : grad_at(sl.out[0]);
  if (sl.out.size() > 1) b.grad_in_list = list(sl.out, grad_at);
}

}  // namespace detail
}  // namespace pipetype
