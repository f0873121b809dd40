// pipetype/host/binding.hpp — a lowered program bound to a model's stages and host buffers.
//
// Binding is what the host executor does once, before any step (like instantiating a CUDA
// graph): every slot index of the lowered program becomes an address in a pool allocated here
// (the layout of bind/layout.hpp), every stage becomes a function pointer to its forward and
// backward (bind/stage_entry.hpp), the model is checked against the plan (bind/checks.hpp), and
// every event wait becomes "the other stream has completed its first k ops" (the record that
// CUDA would resolve when the wait is issued). Nothing is decided: the bound ops are the
// lowered ops, in their order, one for one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetype/bind/checks.hpp"
#include "pipetype/bind/layout.hpp"
#include "pipetype/bind/stage_entry.hpp"
#include "pipetype/compile/lowered.hpp"
#include "pipetype/mesh/verify.hpp"
#include "pipetype/core/program.hpp"

namespace pipetype {
namespace detail {

/// 64-byte aligned, zero-filled bytes that do not move.
class aligned_bytes {
 public:
  aligned_bytes() = default;
  explicit aligned_bytes(std::size_t n)
      : p_(n ? static_cast<std::byte*>(::operator new (n, std::align_val_t{64})) : nullptr), n_(n) {
    if (p_) std::memset(p_.get(), 0, n);
  }
  std::byte* data() const noexcept { return p_.get(); }
  std::size_t size() const noexcept { return n_; }

 private:
  struct free_aligned {
    void operator()(std::byte* p) const noexcept { ::operator delete (p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte, free_aligned> p_;
  std::size_t n_ = 0;
};

}  // namespace detail

namespace host {

using pipetype::shape_error;  // the names the host executor's users know
using pipetype::stage_entry;

/// One rank's bound program: an op list per stream, and the buffers they point into.
struct bound_rank {
  std::vector<bound_op> ops[mesh_stream_count];        // by stream: compute, comm (and a mesh's dp)
  std::vector<std::string> labels[mesh_stream_count];  // per op: "act 1F3", for error messages
  pipetype::detail::aligned_bytes activations, gradients, stashes, weight_grads;
  std::vector<std::byte*> adds;      // held weight gradients to add, per op's [add_begin, +add_count)
  std::vector<std::byte*> lists;     // a stage graph's fan-in and fan-out addresses (bind_compute)
  std::vector<std::uint32_t> order;  // each unit (an op, or a group with its transfers) in lowered
                                     // order, as index · 2 + stream
  std::size_t activation_stride = 0, gradient_stride = 0, stash_stride = 0;
  int stash_slots = 0;
};

/// A held weight gradient added after the step (a later lane's, in microbatch order).
struct deferred_add {
  add_fn add = nullptr;
  void* obj = nullptr;
  const std::byte* grad = nullptr;
};

/// The whole program bound to stages and buffers.
struct bound_program {
  int ranks = 0, stages = 0, microbatches = 0, comms = 0;
  int sources = 1;                       // stages that read the batch
  std::size_t batch_bytes = 0;           // per microbatch: the sources' inputs (a chain: stage 0's)
  pipetype::detail::batch_layout batch;  // where the sources' tensors are in a step's feed
  std::vector<stage_entry> entries;      // the model's stages; the plan's stage s runs entries[s % entries.size()]
                                         // (the bound ops point into it: a bound_program is moved, never copied)
  bound_program() = default;
  bound_program(bound_program&&) = default;
  bound_program& operator=(bound_program&&) = default;
  bound_program(const bound_program&) = delete;
  bound_program& operator=(const bound_program&) = delete;
  std::vector<bound_rank> rank;
  std::vector<deferred_add> deferred;          // after a successful step, in this order
  pipetype::detail::output_layout outputs_at;  // the sinks' kept outputs (binding_options::keep_outputs)
  bool keeps_outputs = false;
  bool forward_only = false;  // no backward in the plan (step_feed::forward_only)
  pipetype::detail::aligned_bytes outputs;
};

}  // namespace host

namespace detail {

/// Appends ops to one rank's stream lists in issue order: resolves each event wait as CUDA does
/// when the wait is issued (to the position the event's latest record published on its stream),
/// marks records, and ends each group after its transfers (a record on a group is published
/// then). The order of units (an op, or a group with its transfers) is kept for walk_in_order on
/// the pipeline's two streams.
class op_lists {
 public:
  op_lists(host::bound_rank& br, int events) : br_(br), last_(static_cast<std::size_t>(events > 0 ? events : 0) + 1) {}

  void add(bound_op b, int st, std::string label, int wait_event, int record_event) {
    auto& list = br_.ops[st];
    if (wait_event >= 0) {
      const rec& w = last_.at(static_cast<std::size_t>(wait_event));
      if (w.stream < 0) throw std::invalid_argument("pipetype::host: a wait on an event never recorded");
      b.wait = w.stream != st ? w.end : 0;  // the same stream is ordered already
      b.wait_on = static_cast<std::uint8_t>(w.stream);
    }
    const bool transfer = b.code == op_code::send || b.code == op_code::recv;
    if (b.code == op_code::group) {
      group_open_ = static_cast<int>(list.size());
      group_event_ = record_event;
    } else if (!transfer) {
      group_open_ = -1;  // anything but a transfer ends the group
    }
    list.push_back(b);
    br_.labels[st].push_back(std::move(label));
    const int end_pos = static_cast<int>(list.size());
    if (b.code != op_code::group) list.back().end = end_pos;
    if (group_open_ >= 0) list[static_cast<std::size_t>(group_open_)].end = end_pos;
    if ((!transfer || group_open_ < 0) && st < stream_count)
      br_.order.push_back(static_cast<std::uint32_t>(list.size() - 1) * 2 + static_cast<std::uint32_t>(st));
    if (group_open_ < 0) group_event_ = -1;
    if (record_event >= 0) {
      list.back().record = true;
      last_.at(static_cast<std::size_t>(record_event)) = {st, end_pos};
    }
    if (group_open_ >= 0 && group_event_ >= 0) last_[static_cast<std::size_t>(group_event_)].end = end_pos;
  }
  /// A mark: an op that does nothing, at whose end `event` counts as recorded, though passing it
  /// publishes nothing: a bucketed backward right after it publishes it (host/mesh_binding.hpp).
  void add_mark(int st, std::string label, int event, int index) {
    bound_op b;
    b.code = op_code::collective;
    b.index = index;
    add(b, st, std::move(label), -1, -1);
    last_.at(static_cast<std::size_t>(event)) = {st, static_cast<int>(br_.ops[st].size())};
  }

 private:
  struct rec {
    int stream = -1, end = 0;
  };
  host::bound_rank& br_;
  std::vector<rec> last_;  // per event: where its latest record published
  int group_open_ = -1;    // the open group's index in the comm list
  int group_event_ = -1;   // the event the open group records, if any
};

}  // namespace detail

namespace host {

/// Binds the lowered program of `v` to the stages in `entries` (one per stage, in chain order).
inline bound_program bind(const plan_views& v, std::vector<stage_entry> entries, const binding_options& opt = {}) {
  const program_view& p = v.compute;
  const lowered_view& l = v.lowered;
  bound_program out;
  out.ranks = p.ranks;
  out.stages = p.stages;
  out.microbatches = p.microbatches;
  out.forward_only = is_forward_only(p);
  out.comms = static_cast<int>(l.comms.size());
  const int L = p.lane_length();  // the model's stages (the plan's, unless it has several lanes)
  pipetype::detail::check_model(p, entries, "pipetype::host");
  const pipetype::detail::batch_layout batch = pipetype::detail::batch_layout_of(p, entries);
  const std::vector<int> edge_inputs = pipetype::detail::edge_input_positions(p);  // per-edge inputs' positions
  out.batch_bytes = batch.row;
  out.sources = batch.sources;
  out.batch = batch;

  pipetype::detail::check_gradients(p, entries, opt.ordered_gradients, "pipetype::host");
  out.entries = std::move(entries);
  const std::vector<stage_entry>& E = out.entries;
  out.keeps_outputs = opt.keep_outputs;
  if (opt.keep_outputs) {
    out.outputs_at = pipetype::detail::output_layout_of(batch, E, p.microbatches);
    out.outputs = pipetype::detail::aligned_bytes(out.outputs_at.bytes);
  }

  out.rank.resize(static_cast<std::size_t>(p.ranks));
  struct held_later {
    int stage, microbatch;
    const std::byte* grad = nullptr;
  };
  std::vector<held_later> later;  // later lanes' weight gradients, added after the step
  for (int r = 0; r < p.ranks; ++r) {
    bound_rank& br = out.rank[static_cast<std::size_t>(r)];
    const rank_resources& res = l.resources[static_cast<std::size_t>(r)];
    const op_span ops = l.rank_ops(r);
    const rank_pools layout = pipetype::detail::layout_of(p, ops, res, E);  // the plan's pools (pools_of)
    br.activation_stride = layout.activation_stride;
    br.gradient_stride = layout.gradient_stride;
    br.stash_stride = layout.stash_stride;
    br.activations = pipetype::detail::aligned_bytes(layout.activations);
    br.gradients = pipetype::detail::aligned_bytes(layout.gradients);
    auto act_at = [&](int slot) {
      return slot < 0 ? nullptr : br.activations.data() + br.activation_stride * static_cast<std::size_t>(slot);
    };
    auto grad_at = [&](int slot) {
      return slot < 0 || br.gradients.data() == nullptr
                 ? nullptr
                 : br.gradients.data() + br.gradient_stride * static_cast<std::size_t>(slot);
    };
    br.stash_slots = opt.place_stashes && layout.stash_stride > 0 ? res.stash_slots : 0;
    br.stashes = pipetype::detail::aligned_bytes(br.stash_slots > 0 ? layout.stashes : 0);

    br.lists.reserve(pipetype::detail::list_pool_size(l, ops));
    const pipetype::detail::weight_grad_plan wg = pipetype::detail::plan_weight_grads(ops, res, E);
    br.weight_grads = pipetype::detail::aligned_bytes(wg.bytes);
    for (const pipetype::detail::weight_grad_plan::held& h : wg.later)
      later.push_back({h.stage, h.microbatch, br.weight_grads.data() + wg.offset[static_cast<std::size_t>(h.slot)]});

    pipetype::detail::op_lists lists(br, res.events);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const lowered_op& o = ops[i];
      bound_op b;
      b.code = o.code;
      b.what = o.what;
      b.stage = o.stage % L;
      b.plan_stage = o.stage;
      b.microbatch = o.microbatch;
      b.index = static_cast<int>(i);
      std::string label;
      if (o.code == op_code::compute) {
        const stage_entry& e = E[static_cast<std::size_t>(o.stage) % E.size()];
        pipetype::detail::bind_compute(
            b, o, e, L, act_at, grad_at,
            o.stash_slot >= 0 && br.stash_slots > 0
                ? br.stashes.data() + br.stash_stride * static_cast<std::size_t>(o.stash_slot)
                : nullptr,
            l, batch, br.lists);
        // a sink's output, kept; a local loss's travels on in its slot, and is not kept
        if (opt.keep_outputs && o.what == kind::F && b.sink >= 0 && b.out != nullptr)
          throw std::invalid_argument("pipetype::host: keep_outputs with stage " + std::to_string(b.stage) +
                                      ", a loss whose output travels on over a detached edge: only a last stage's "
                                      "output is kept");
        if (opt.keep_outputs && o.what == kind::F && b.sink >= 0)
          b.out = out.outputs.data() + out.outputs_at.at(b.sink, o.microbatch, p.microbatches);
        if (wg.slot[i] >= 0) {
          b.weight_grad = br.weight_grads.data() + wg.offset[static_cast<std::size_t>(wg.slot[i])];
          b.add = e.add;
          b.add_begin = static_cast<int>(br.adds.size());
          b.add_count = static_cast<int>(wg.adds[i].size());
          for (int g : wg.adds[i]) br.adds.push_back(br.weight_grads.data() + wg.offset[static_cast<std::size_t>(g)]);
        }
        label = pipetype::detail::action_name(o);
      } else if (o.code == op_code::group) {
        label = "group";
      } else {
        b.peer = o.peer;
        b.comm = o.comm;
        // an activation of F(stage), or the gradient B/I(stage) made for its input (only the
        // tensors that carry one: zero bytes when none does), sized by its end on this rank
        const stage_entry& e = E[static_cast<std::size_t>(pipetype::detail::transfer_stage(p, o)) % E.size()];
        b.edge_input = pipetype::detail::transfer_edge_input(edge_inputs, o);
        b.bytes = pipetype::detail::full_transfer_bytes(o, e, b.edge_input);
        b.entry = &e;  // a transfer of varying tensors moves its microbatch's bytes (transfer_bytes)
        b.buf = o.what == kind::F ? act_at(o.slot) : grad_at(o.slot);
        label = std::string(o.what == kind::F ? "activation " : "gradient ") + pipetype::detail::action_name(o);
      }
      lists.add(b, static_cast<int>(o.stream), std::move(label), o.wait_event, o.record_event);
    }
  }
  // later lanes' weight gradients: per model stage, chain by chain, in microbatch order
  pipetype::detail::sort_later(later, L);
  for (const held_later& h : later) {
    const stage_entry& e = out.entries[static_cast<std::size_t>(h.stage % L)];
    out.deferred.push_back({e.add, e.obj, h.grad});
  }
  return out;
}

}  // namespace host
}  // namespace pipetype
