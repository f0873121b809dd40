// pipetype/exec/binding.hpp — a lowered program bound to a model's stages and buffers.
//
// Binding is what an executor does once, before any step (like instantiating a CUDA graph):
// every slot index of the lowered program becomes an address in a pool allocated here, every
// stage becomes a function pointer to its forward/backward, and every event wait becomes "the
// other stream has completed its first k ops" (the record that CUDA would resolve when the wait
// is issued). Nothing is decided: the bound ops are the lowered ops, in their order, one for one.
//
//   pools per rank   activations: resources.activation_slots × the largest activation that
//                    touches the rank; gradients likewise; stashes: peak live (stage,
//                    microbatch) pairs on the rank (F to its last backward) × the largest stash
//   checks (before any step; shape_error / std::invalid_argument, naming the place)
//     • the plan has as many stages as the model;
//     • stage s's output has as many bytes as stage s+1's input (dynamic extents);
//     • a schedule that splits a stage's backward (I/W) meets a stage with backward_input and
//       backward_weight;
//     • determinism: each stage produces its weight gradients (B, or W when split) in
//       microbatch order, so accumulation order is the same under every schedule
//       (binding_options::ordered_gradients = false lifts this).
//   two chains (DualPipe): the plan's stage k·L + i runs the model's stage i on another rank, so
//   one stage object serves two ranks at once — its forward/backward must write only through
//   their contexts, and it must hand its weight gradients to pipetype (weight_grad): chain 0's
//   are added in microbatch order during the step, the later chains' are held and added after
//   it, in microbatch order, so the sum is the unpipelined one bit for bit.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/compile/plan.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/graph/chain.hpp"
#include "pipetype/graph/stage.hpp"
#include "pipetype/io/text.hpp"

namespace pipetype::host {

/// A model and a plan (or a batch and a model) that do not fit each other.
struct shape_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct bound_op;
using stage_fn = void (*)(void* stage, const bound_op& op, const std::byte* batch);
using add_fn = void (*)(void* stage, const std::byte* weight_grad, void* stream);

/// One lowered op with its addresses resolved. `wait` > 0: before the op, the rank's other
/// stream must have completed `wait` of its ops; `record`: after the op, publish how many of
/// this stream's ops have completed (`end`).
struct bound_op {
  // first cache line: what every op and a forward read
  op_code code = op_code::compute;
  kind what = kind::F;
  bool record = false;
  int wait = 0;
  int end = 0;  // position after this op (a group: after its transfers)
  int stage = -1;
  int microbatch = -1;
  std::uint32_t n_in = 0, n_out = 0;  // elements
  int add_count = 0;                  // after the op: add this many held weight gradients, in order
  stage_fn fn = nullptr;
  void* obj = nullptr;
  std::byte* in = nullptr;  // nullptr on stage 0: the batch, at microbatch · in_bytes
  std::byte* out = nullptr;
  // then: backwards, weight gradients, transfers
  std::byte* grad_out = nullptr;  // the gradient of this stage's output (from stage + 1)
  std::byte* grad_in = nullptr;   // the gradient of this stage's input (to stage − 1)
  std::byte* stash = nullptr;
  std::uint32_t n_stash = 0, n_weight_grad = 0;
  std::byte* weight_grad = nullptr;  // where B/W writes this microbatch's weight gradient
  add_fn add = nullptr;
  int add_begin = 0;       // bound_rank::adds[add_begin .. + add_count)
  int index = 0;           // position in the rank's lowered op list
  int plan_stage = -1;     // the plan's stage (`stage` is the model's: they differ in a later chain)
  void* stream = nullptr;  // handed to the stage's context (the CUDA executor's compute stream)
  int peer = -1;
  int comm = -1;
  std::byte* buf = nullptr;
  std::size_t bytes = 0;
};

/// What binding needs to know about one stage.
struct stage_entry {
  void* obj = nullptr;
  stage_fn fn[kind_count] = {};  // by kind: F, B, I, W (nullptr: not provided)
  add_fn add = nullptr;          // stages with a weight_grad: adds one into weight_gradients()
  bool adds_on_stream = false;   // the stage adds them itself, on a stream (add_weight_grad)
  std::size_t in_elems = 0, out_elems = 0, stash_elems = 0, weight_grad_elems = 0;
  std::size_t in_size = 0, out_size = 0, stash_size = 0, weight_grad_size = 0;  // element sizes
  bool split = false;
  constexpr std::size_t weight_grad_bytes() const { return weight_grad_elems * weight_grad_size; }
  constexpr std::size_t in_bytes() const { return in_elems * in_size; }
  constexpr std::size_t out_bytes() const { return out_elems * out_size; }
  constexpr std::size_t stash_bytes() const { return stash_elems * stash_size; }
};

namespace detail {

// The op's input: its slot, or on stage 0 the microbatch's slice of the batch.
template <class S>
const input_t<S>* input_of(const bound_op& op, const std::byte* batch) {
  const std::byte* in = op.in ? op.in : batch + static_cast<std::size_t>(op.microbatch) * op.n_in * sizeof(input_t<S>);
  return reinterpret_cast<const input_t<S>*>(in);
}

template <class S>
forward_ctx<S> make_forward(const bound_op& op, const std::byte* batch) {
  using O = output_t<S>;
  return {op.stage,
          op.microbatch,
          {input_of<S>(op, batch), op.n_in},
          {reinterpret_cast<O*>(op.out), op.out ? op.n_out : 0},
          {reinterpret_cast<stash_t<S>*>(op.stash), op.n_stash},
          op.stream};
}
template <class S>
backward_ctx<S> make_backward(const bound_op& op, const std::byte* batch, bool input_part, bool weight_part) {
  using I = input_t<S>;
  using O = output_t<S>;
  const bool gi = input_part && op.grad_in != nullptr;
  const bool wg = weight_part && op.weight_grad != nullptr;
  return {op.stage,
          op.microbatch,
          {input_of<S>(op, batch), op.n_in},
          {reinterpret_cast<const O*>(op.grad_out), op.grad_out ? op.n_out : 0},
          {reinterpret_cast<I*>(op.grad_in), gi ? op.n_in : 0},
          {reinterpret_cast<stash_t<S>*>(op.stash), op.n_stash},
          {reinterpret_cast<weight_grad_t<S>*>(op.weight_grad), wg ? op.n_weight_grad : 0},
          op.stream};
}

template <class S>
void run_forward(void* s, const bound_op& op, const std::byte* batch) {
  static_cast<S*>(s)->forward(make_forward<S>(op, batch));
}
template <class S>
void run_backward(void* s, const bound_op& op, const std::byte* batch) {
  S& st = *static_cast<S*>(s);
  if constexpr (has_full_backward<S>) {
    st.backward(make_backward<S>(op, batch, true, true));
  } else {
    st.backward_input(make_backward<S>(op, batch, true, false));
    st.backward_weight(make_backward<S>(op, batch, false, true));
  }
}
template <class S>
void run_backward_input(void* s, const bound_op& op, const std::byte* batch) {
  static_cast<S*>(s)->backward_input(make_backward<S>(op, batch, true, false));
}
template <class S>
void run_backward_weight(void* s, const bound_op& op, const std::byte* batch) {
  static_cast<S*>(s)->backward_weight(make_backward<S>(op, batch, false, true));
}
template <class S>
void add_weight_grad(void* s, const std::byte* g, void* stream) {
  S& st = *static_cast<S*>(s);
  const std::span<weight_grad_t<S>> acc = st.weight_gradients();
  const auto* x = reinterpret_cast<const weight_grad_t<S>*>(g);
  if constexpr (adds_weight_grad_on_stream<S>) {
    st.add_weight_grad(std::span<const weight_grad_t<S>>(x, acc.size()), stream);
  } else {
    for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += x[i];
  }
}

template <stage S>
stage_entry entry_of(S& s) {
  stage_entry e;
  e.obj = &s;
  e.fn[static_cast<int>(kind::F)] = &run_forward<S>;
  e.fn[static_cast<int>(kind::B)] = &run_backward<S>;
  if constexpr (has_split_backward<S>) {
    e.split = true;
    e.fn[static_cast<int>(kind::I)] = &run_backward_input<S>;
    e.fn[static_cast<int>(kind::W)] = &run_backward_weight<S>;
  }
  if constexpr (has_weight_grad<S>) {
    e.add = &add_weight_grad<S>;
    e.adds_on_stream = adds_weight_grad_on_stream<S>;
    e.weight_grad_elems = weight_grad_extent(s);
    e.weight_grad_size = sizeof(weight_grad_t<S>);
    if (s.weight_gradients().size() != e.weight_grad_elems)
      throw shape_error("pipetype::host: a stage's weight_gradients() has " +
                        std::to_string(s.weight_gradients().size()) + " elements, its weight_grad " +
                        std::to_string(e.weight_grad_elems));
  }
  e.in_elems = input_extent(s);
  e.out_elems = output_extent(s);
  e.stash_elems = stash_extent(s);
  e.in_size = sizeof(input_t<S>);
  e.out_size = sizeof(output_t<S>);
  e.stash_size = sizeof(stash_t<S>);
  return e;
}

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

constexpr std::size_t round_up64(std::size_t n) { return (n + 63) / 64 * 64; }

/// Takes the lowest free slot of `busy` (growing it when none is free); returns its index.
inline std::size_t take_lowest_free(std::vector<char>& busy) {
  const auto k = static_cast<std::size_t>(std::find(busy.begin(), busy.end(), 0) - busy.begin());
  if (k == busy.size()) busy.push_back(0);
  busy[k] = 1;
  return k;
}

inline std::string action_name(const lowered_op& o) { return to_text(action{o.what, o.stage, o.microbatch, false}); }

// ---- pieces every executor's binding shares (host threads here, cuda/executor.hpp) ----------

/// The model fits the plan: one entry per model stage, each stage's output the next one's input.
/// `who` prefixes the message ("pipetype::host").
inline void check_model(const program_view& p, const std::vector<stage_entry>& entries, const std::string& who) {
  const int L = p.chain_length();  // the model's stages (the plan's, unless it has several chains)
  if (static_cast<int>(entries.size()) != L)
    throw shape_error(who + ": the plan has " + std::to_string(p.stages) + " stages" +
                      (p.chains > 1 ? " (" + std::to_string(p.chains) + " chains of " + std::to_string(L) + ")" : "") +
                      " but the model has " + std::to_string(entries.size()));
  for (int s = 0; s + 1 < L; ++s) {
    const stage_entry& a = entries[static_cast<std::size_t>(s)];
    const stage_entry& b = entries[static_cast<std::size_t>(s) + 1];
    if (a.out_bytes() != b.in_bytes() || a.out_size != b.in_size)
      throw shape_error(who + ": stage " + std::to_string(s) + " gives " + std::to_string(a.out_elems) +
                        " elements of " + std::to_string(a.out_size) + " bytes but stage " + std::to_string(s + 1) +
                        " takes " + std::to_string(b.in_elems) + " of " + std::to_string(b.in_size));
  }
}

/// An I or W action meets a stage that cannot split its backward.
inline void check_split(const stage_entry& e, const action& a, const std::string& who) {
  if ((a.what == kind::I || a.what == kind::W) && !e.split)
    throw std::invalid_argument(who + ": the schedule splits the backward (stage " + std::to_string(a.stage) +
                                ", microbatch " + std::to_string(a.microbatch) + ", action " + to_text(a) +
                                ") but the stage has no backward_input/backward_weight");
}

/// One rank's buffer layout: the stride of its activation and gradient slots (the largest
/// activation crossing into, out of or within the rank), its stash stride, and per op the stash
/// slot it uses — live from F(s,j) to the last backward of (s,j) on the rank, lowest free first;
/// a slot the first half of an overlapped pair frees stays taken through the second half (the
/// halves may run at once on a device).
struct rank_layout {
  std::size_t stride = 0, stash_stride = 0;
  int stash_slots = 0;
  std::vector<int> op_stash;  // per lowered op of the rank; -1: none
};

inline rank_layout layout_of(const program_view& p, std::span<const lowered_op> ops,
                             const std::vector<stage_entry>& entries) {
  const auto S = static_cast<std::size_t>(p.stages), m = static_cast<std::size_t>(p.microbatches);
  const std::size_t L = entries.size();
  std::vector<char> here(S, 0);
  for (const lowered_op& o : ops)
    if (o.code == op_code::compute) here[static_cast<std::size_t>(o.stage)] = 1;
  std::size_t act = 0, stash = 0;
  for (std::size_t s = 0; s < S; ++s) {
    if (!here[s]) continue;
    const stage_entry& e = entries[s % L];
    const int si = static_cast<int>(s);
    act = std::max({act, !p.chain_head(si) ? e.in_bytes() : 0, !p.chain_tail(si) ? e.out_bytes() : 0});
    stash = std::max(stash, e.stash_bytes());
  }
  rank_layout out;
  out.stride = round_up64(act);
  out.stash_stride = round_up64(stash);
  out.op_stash.assign(ops.size(), -1);
  if (stash == 0) return out;
  std::vector<int> last_use(S * m, -1), stash_slot(S * m, -1);
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].code == op_code::compute && ops[i].what != kind::F)
      last_use[static_cast<std::size_t>(ops[i].stage) * m + static_cast<std::size_t>(ops[i].microbatch)] =
          static_cast<int>(i);
  std::vector<char> busy;
  int held = -1;  // a slot freed by the first half of an overlapped pair: free only after the second
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const lowered_op& o = ops[i];
    if (o.code != op_code::compute) continue;
    const std::size_t q = static_cast<std::size_t>(o.stage) * m + static_cast<std::size_t>(o.microbatch);
    if (o.what == kind::F) stash_slot[q] = static_cast<int>(take_lowest_free(busy));
    out.op_stash[i] = stash_slot[q];
    if (held >= 0) {  // this is the pair's second half: both halves have their slots now
      busy[static_cast<std::size_t>(held)] = 0;
      held = -1;
    }
    if (o.what != kind::F && last_use[q] == static_cast<int>(i) && stash_slot[q] >= 0) {
      if (o.overlapped)  // the halves may run at once: the second must not take this slot
        held = stash_slot[q];
      else
        busy[static_cast<std::size_t>(stash_slot[q])] = 0;
    }
  }
  out.stash_slots = static_cast<int>(busy.size());
  return out;
}

/// One rank's weight gradients handed to pipetype (stages with a weight_grad): each B/W writes
/// into a held slot; after it, the held ones that are next in microbatch order are added, so
/// out-of-order backwards still add in order. A later chain's (DualPipe's second direction) are
/// held to the end of the step and added after it.
struct weight_grad_plan {
  struct held {
    int stage = -1, microbatch = -1, slot = -1;
  };
  std::vector<int> slot;               // per op: the slot its B/W writes; -1: none
  std::vector<std::vector<int>> adds;  // per op: the slots added after it, in microbatch order
  std::vector<std::size_t> offset;     // per slot: its byte offset in the rank's pool
  std::size_t bytes = 0;               // the pool
  std::vector<held> later;             // later chains' slots, in op order
};

inline weight_grad_plan plan_weight_grads(std::span<const lowered_op> ops, const std::vector<stage_entry>& entries) {
  const std::size_t L = entries.size();
  weight_grad_plan out;
  out.slot.assign(ops.size(), -1);
  out.adds.resize(ops.size());
  int stages = 0, microbatches = 0;
  for (const lowered_op& o : ops)
    if (o.code == op_code::compute) {
      stages = std::max(stages, o.stage + 1);
      microbatches = std::max(microbatches, o.microbatch + 1);
    }
  const auto m = static_cast<std::size_t>(microbatches);
  for (std::size_t s = 0; s < static_cast<std::size_t>(stages); ++s) {
    const stage_entry& e = entries[s % L];
    if (e.add == nullptr) continue;
    const std::size_t stride = round_up64(e.weight_grad_bytes());
    const bool later_chain = s >= L;  // held to the end of the step, added after chain 0's
    std::vector<int> held(m, -1);     // microbatch → local slot
    std::vector<char> used;
    const int first = static_cast<int>(out.offset.size());
    std::size_t next = 0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const lowered_op& o = ops[i];
      if (o.code != op_code::compute || static_cast<std::size_t>(o.stage) != s) continue;
      if (o.what != kind::B && o.what != kind::W) continue;
      const std::size_t k = take_lowest_free(used);
      if (k == out.offset.size() - static_cast<std::size_t>(first)) {  // a new slot
        out.offset.push_back(out.bytes);
        out.bytes += stride;
      }
      held[static_cast<std::size_t>(o.microbatch)] = static_cast<int>(k);
      out.slot[i] = first + static_cast<int>(k);
      if (later_chain) {  // never freed: added after the step
        out.later.push_back({static_cast<int>(s), o.microbatch, first + static_cast<int>(k)});
        continue;
      }
      while (next < m && held[next] >= 0) {
        out.adds[i].push_back(first + held[next]);
        used[static_cast<std::size_t>(held[next])] = 0;
        ++next;
      }
    }
  }
  return out;
}

/// Later chains' held weight gradients in the order they are added after a step: per model
/// stage, chain by chain, in microbatch order. `H` has stage and microbatch.
template <class H>
void sort_later(std::vector<H>& later, int L) {
  std::stable_sort(later.begin(), later.end(), [L](const H& x, const H& y) {
    const int lx = x.stage % L, ly = y.stage % L;
    return lx != ly ? lx < ly : x.stage != y.stage ? x.stage < y.stage : x.microbatch < y.microbatch;
  });
}

/// Weight gradients are made in an order every schedule agrees on: a stage that accumulates its
/// own (no weight_grad) must run its B/W in microbatch order (unless `ordered` is false), and a
/// plan with several chains runs a model stage on two ranks, so pipetype must do the adding.
inline void check_gradients(const program_view& p, const std::vector<stage_entry>& entries, bool ordered,
                            const std::string& who) {
  const int L = p.chain_length();
  std::vector<int> last_weight_mb(static_cast<std::size_t>(p.stages), -1);
  for (const action& a : p.actions) {
    const stage_entry& e = entries[static_cast<std::size_t>(a.stage % L)];
    auto where = [&] {  // for a message only
      return "stage " + std::to_string(a.stage) + ", microbatch " + std::to_string(a.microbatch) + ", action " +
             to_text(a);
    };
    check_split(e, a, who);
    if (p.chains > 1 && e.add == nullptr && (a.what == kind::B || a.what == kind::W))
      throw std::invalid_argument(who + ": " + where() + ": the plan runs the model's stage " +
                                  std::to_string(a.stage % L) + " in " + std::to_string(p.chains) +
                                  " chains (DualPipe's two directions) on different ranks at once, and the stage "
                                  "accumulates its own gradients; declare a weight_grad so pipetype adds them");
    if (a.what == kind::B || a.what == kind::W) {
      int& last = last_weight_mb[static_cast<std::size_t>(a.stage)];
      if (ordered && e.add == nullptr && a.microbatch < last)
        throw std::invalid_argument(
            who + ": " + where() + " comes after microbatch " + std::to_string(last) +
            "'s weight gradient; the stage accumulates its own gradients, which would then differ from other "
            "schedules' (declare a weight_grad so pipetype adds them in microbatch order, or set "
            "ordered_gradients = false)");
      last = a.microbatch > last ? a.microbatch : last;
    }
  }
}

/// The stage call of a compute op: what it runs and the buffers it reads and writes, given the
/// rank's activation and gradient slot addresses and its stash (nullptr: none).
template <class ActAt, class GradAt>
void bind_compute(bound_op& b, const lowered_op& o, const stage_entry& e, int L, ActAt act_at, GradAt grad_at,
                  std::byte* stash) {
  b.code = o.code;
  b.what = o.what;
  b.stage = o.stage % L;  // what the stage sees in its context
  b.plan_stage = o.stage;
  b.microbatch = o.microbatch;
  b.fn = e.fn[static_cast<int>(o.what)];
  b.obj = e.obj;
  b.n_in = static_cast<std::uint32_t>(e.in_elems);
  b.n_out = static_cast<std::uint32_t>(e.out_elems);
  b.in = act_at(o.slot);
  if (o.what == kind::F) {
    b.out = act_at(o.out_slot);
  } else {
    b.grad_out = grad_at(o.grad_slot);
    b.grad_in = grad_at(o.out_slot);
  }
  b.stash = stash;
  b.n_stash = stash ? static_cast<std::uint32_t>(e.stash_elems) : 0;
}

}  // namespace detail

/// The stages of a model (a chain or uniform_chain), as the executors bind them.
template <class M>
std::vector<stage_entry> entries_of(M& model) {
  std::vector<stage_entry> out;
  out.reserve(static_cast<std::size_t>(model.size()));
  model.for_each_stage([&](int, auto& s) { out.push_back(detail::entry_of(s)); });
  return out;
}

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
  if (!p.ok()) throw std::invalid_argument("pipetype::host: the plan was rejected: " + describe(p.result));
  return {p.compute(), p.lowered()};
}

struct binding_options {
  bool ordered_gradients = true;  // require weight gradients in microbatch order (determinism)
};

/// One rank's bound program: an op list per stream, and the buffers they point into.
struct bound_rank {
  std::vector<bound_op> ops[stream_count];        // by stream: compute, comm
  std::vector<std::string> labels[stream_count];  // per op: "act 1F3", for error messages
  detail::aligned_bytes activations, gradients, stashes, weight_grads;
  std::vector<std::byte*> adds;      // held weight gradients to add, per op's [add_begin, +add_count)
  std::vector<std::uint32_t> order;  // each unit (an op, or a group with its transfers) in lowered
                                     // order, as index · 2 + stream
  std::size_t activation_stride = 0, stash_stride = 0;
  int stash_slots = 0;
};

/// A held weight gradient added after the step (a later chain's, in microbatch order).
struct deferred_add {
  add_fn add = nullptr;
  void* obj = nullptr;
  const std::byte* grad = nullptr;
};

/// The whole program bound to stages and buffers.
struct bound_program {
  int ranks = 0, stages = 0, microbatches = 0, comms = 0;
  std::size_t batch_bytes = 0;       // per microbatch: stage 0's input
  std::vector<stage_entry> entries;  // the model's stages; the plan's stage s runs entries[s % entries.size()]
  std::vector<bound_rank> rank;
  std::vector<deferred_add> deferred;  // after a successful step, in this order
};

/// Binds the lowered program of `v` to the stages in `entries` (one per stage, in chain order).
inline bound_program bind(const plan_views& v, std::vector<stage_entry> entries, const binding_options& opt = {}) {
  const program_view& p = v.compute;
  const lowered_view& l = v.lowered;
  bound_program out;
  out.ranks = p.ranks;
  out.stages = p.stages;
  out.microbatches = p.microbatches;
  out.comms = static_cast<int>(l.comms.size());
  const int L = p.chain_length();  // the model's stages (the plan's, unless it has several chains)
  detail::check_model(p, entries, "pipetype::host");
  out.batch_bytes = entries.front().in_bytes();

  detail::check_gradients(p, entries, opt.ordered_gradients, "pipetype::host");
  out.entries = std::move(entries);
  const std::vector<stage_entry>& E = out.entries;

  out.rank.resize(static_cast<std::size_t>(p.ranks));
  struct held_later {
    int stage, microbatch;
    const std::byte* grad = nullptr;
  };
  std::vector<held_later> later;  // later chains' weight gradients, added after the step
  for (int r = 0; r < p.ranks; ++r) {
    bound_rank& br = out.rank[static_cast<std::size_t>(r)];
    const rank_resources& res = l.resources[static_cast<std::size_t>(r)];
    const std::span<const lowered_op> ops = l.rank_ops(r);
    const detail::rank_layout layout = detail::layout_of(p, ops, E);
    br.activation_stride = layout.stride;
    br.stash_stride = layout.stash_stride;
    br.activations = detail::aligned_bytes(br.activation_stride * static_cast<std::size_t>(res.activation_slots));
    br.gradients = detail::aligned_bytes(br.activation_stride * static_cast<std::size_t>(res.gradient_slots));
    auto act_at = [&](int slot) {
      return slot < 0 ? nullptr : br.activations.data() + br.activation_stride * static_cast<std::size_t>(slot);
    };
    auto grad_at = [&](int slot) {
      return slot < 0 ? nullptr : br.gradients.data() + br.activation_stride * static_cast<std::size_t>(slot);
    };
    const std::vector<int>& op_stash = layout.op_stash;
    br.stash_slots = layout.stash_slots;
    br.stashes = detail::aligned_bytes(br.stash_stride * static_cast<std::size_t>(layout.stash_slots));

    const detail::weight_grad_plan wg = detail::plan_weight_grads(ops, E);
    br.weight_grads = detail::aligned_bytes(wg.bytes);
    for (const detail::weight_grad_plan::held& h : wg.later)
      later.push_back({h.stage, h.microbatch, br.weight_grads.data() + wg.offset[static_cast<std::size_t>(h.slot)]});

    // events: the position each record publishes, per event, as CUDA resolves a wait at call time
    struct rec {
      int stream = -1, end = 0;
    };
    std::vector<rec> last_record(static_cast<std::size_t>(res.events > 0 ? res.events : 0) + 1);
    int group_open = -1;   // index in the comm list of the open group
    int group_event = -1;  // the event the open group records, if any
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const lowered_op& o = ops[i];
      const int st = static_cast<int>(o.stream);
      auto& list = br.ops[st];
      auto& labels = br.labels[st];
      bound_op b;
      b.code = o.code;
      b.what = o.what;
      b.stage = o.stage % L;
      b.plan_stage = o.stage;
      b.microbatch = o.microbatch;
      b.index = static_cast<int>(i);
      if (o.wait_event >= 0) {
        const rec& w = last_record.at(static_cast<std::size_t>(o.wait_event));
        if (w.stream < 0) throw std::invalid_argument("pipetype::host: a wait on an event never recorded");
        b.wait = w.stream != st ? w.end : 0;  // the same stream is ordered already
      }
      if (o.code == op_code::compute) {
        const stage_entry& e = E[static_cast<std::size_t>(o.stage) % E.size()];
        detail::bind_compute(
            b, o, e, L, act_at, grad_at,
            op_stash[i] >= 0 ? br.stashes.data() + br.stash_stride * static_cast<std::size_t>(op_stash[i]) : nullptr);
        if (wg.slot[i] >= 0) {
          b.weight_grad = br.weight_grads.data() + wg.offset[static_cast<std::size_t>(wg.slot[i])];
          b.n_weight_grad = static_cast<std::uint32_t>(e.weight_grad_elems);
          b.add = e.add;
          b.add_begin = static_cast<int>(br.adds.size());
          b.add_count = static_cast<int>(wg.adds[i].size());
          for (int g : wg.adds[i]) br.adds.push_back(br.weight_grads.data() + wg.offset[static_cast<std::size_t>(g)]);
        }
        group_open = -1;
        labels.push_back(detail::action_name(o));
      } else {
        if (o.code == op_code::group) {
          group_open = static_cast<int>(list.size());
          labels.emplace_back("group");
        } else {
          b.peer = o.peer;
          b.comm = o.comm;
          // an activation of F(stage), or the gradient B/I(stage) made for its input
          const stage_entry& e = E[static_cast<std::size_t>(o.stage) % E.size()];
          b.bytes = o.what == kind::F ? e.out_bytes() : e.in_bytes();
          b.buf = o.what == kind::F ? act_at(o.slot) : grad_at(o.slot);
          labels.push_back(std::string(o.what == kind::F ? "activation " : "gradient ") + detail::action_name(o));
        }
      }
      list.push_back(b);
      // the op's (or its group's) end position; a record on a group is published after its transfers
      const int end_pos = static_cast<int>(list.size());
      if (o.code != op_code::group) list.back().end = end_pos;
      if (group_open >= 0) list[static_cast<std::size_t>(group_open)].end = end_pos;
      if (o.code == op_code::compute || o.code == op_code::group || group_open < 0)
        br.order.push_back(static_cast<std::uint32_t>(list.size() - 1) * 2 + static_cast<std::uint32_t>(st));
      if (o.code == op_code::group) group_event = o.record_event;
      if (group_open < 0) group_event = -1;
      if (o.record_event >= 0) {
        list.back().record = true;
        last_record.at(static_cast<std::size_t>(o.record_event)) = {st, end_pos};
      }
      // a record on a group is published after the group's last transfer
      if (group_open >= 0 && group_event >= 0) last_record[static_cast<std::size_t>(group_event)].end = end_pos;
    }
  }
  // later chains' weight gradients: per model stage, chain by chain, in microbatch order
  detail::sort_later(later, L);
  for (const held_later& h : later) {
    const stage_entry& e = out.entries[static_cast<std::size_t>(h.stage % L)];
    out.deferred.push_back({e.add, e.obj, h.grad});
  }
  return out;
}

}  // namespace pipetype::host
