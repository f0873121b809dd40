// pipetype/bind/stage_entry.hpp — a stage as every executor calls it: erased to function
// pointers and extents, once, when an executor is built.
//
// `entries_of(model)` turns each stage of a chain or uniform_chain into a `stage_entry`: a
// pointer to the object, one function pointer per kind it offers (F, B and, for stages that
// split their backward, I and W), the shapes of its input and output (graph/tensors.hpp: one
// tensor or a set, in bytes), its stash and weight-gradient extents and element sizes, and — for stages that hand their
// weight gradients to pipetype — the function that adds one into the stage's accumulator. A `bound_op` is one lowered
// op with its addresses resolved; an executor calls `op.fn(op.obj, op, feed)` and the stage receives the typed context
// of graph/stage.hpp. Nothing here allocates or knows an executor: the host executor (host/) and the device executor
// (cuda/) both bind through it.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/core/action.hpp"
#include "pipetype/core/mesh.hpp"
#include "pipetype/graph/chain.hpp"
#include "pipetype/graph/floats.hpp"
#include "pipetype/graph/stage.hpp"

namespace pipetype {

/// A model and a plan (or a batch and a model) that do not fit each other.
struct shape_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct bound_op;
struct step_feed;
using stage_fn = void (*)(void* stage, const bound_op& op, const step_feed& feed);
/// A rank's stash slots in use, as its ops run, and the most at once (a step with memory
/// actions: mesh/memory_slots.hpp; ops on several streams update it).
struct memory_use {
  std::atomic<int> in_use{0}, high{0};
};
/// Adds elements [begin, end) of one microbatch's weight gradient into weight_gradients() (a
/// bucket of a bucketed step's last weight backward, on the host).
using add_range_fn = void (*)(void* stage, const std::byte* weight_grad, std::size_t begin, std::size_t end);
/// A bucketed step's last weight backward of a stage on the host (mesh_op::bucket_event): the
/// buckets of its weight gradient, which the executor adds into weight_gradients() bucket by
/// bucket — as the stage says them written (backward_ctx::gradients_ready), the rest at its end —
/// and publishes on the compute stream at positions first … first + buckets − 1, where the
/// reductions' waits look (host/mesh_binding.hpp puts a mark op at each before the backward).
struct bucket_marks {
  bucket_signal signal;              // the buckets, and what the backward's ctx calls (with this)
  int rank = -1;                     // the global rank
  int first = 0;                     // bucket 0's position on the compute stream
  std::size_t elems = 0;             // the weight gradient's (bucket_of's n)
  void* stage = nullptr;             // the stage, and its held weight gradients to add into
  std::byte* const* adds = nullptr;  // its weight_gradients(), `add_count` of them, by `add_range`
  int add_count = 0;
  add_range_fn add_range = nullptr;
  stage_fn call = nullptr;                         // the backward itself (the op's fn is run_bucketed, which calls it)
  void (*publish)(void* at, int value) = nullptr;  // the executor's: the compute stream reached `value`
  void* at = nullptr;
  int done = 0;  // buckets added and published in the running call (its thread's alone)
  const std::byte* params = nullptr;  // a lending stage's gathered parameters (bound_op::params) under FSDP
};
using add_fn = void (*)(void* stage, const std::byte* weight_grad, void* stream);
/// An element type as a collective library names it (NCCL's ncclFloat32, ...); `other`: one that
/// only moves as bytes (a gather), not one a device collective can sum.
enum class elem_kind : std::uint8_t { other, f32, f64, i32, i64, f16, bf16 };
template <class T>
constexpr elem_kind elem_kind_of() noexcept {
  if constexpr (std::is_same_v<T, float>)
    return elem_kind::f32;
  else if constexpr (std::is_same_v<T, double>)
    return elem_kind::f64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return elem_kind::i32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return elem_kind::i64;
  else if constexpr (std::is_same_v<T, half>)
    return elem_kind::f16;
  else if constexpr (std::is_same_v<T, bfloat16>)
    return elem_kind::bf16;
  else
    return elem_kind::other;
}

/// A stage's array as bytes (weight_gradients(), parameters(), tied_gradients(tie)).
using bytes_fn = std::span<std::byte> (*)(void* stage, int tie);
/// Sums n arrays of the stage's weight-gradient type elementwise over [begin, end), in the order
/// given; writes the sum to parts [keep_begin, keep_end) and leaves the others as they were.
using reduce_fn = void (*)(std::byte* const* parts, int n, std::size_t begin, std::size_t end, int keep_begin,
                           int keep_end);
/// Σ x² over elements [begin, end) of an array of the stage's weight-gradient type, in double and
/// in element order (GRAD_NORM's part of one array).
using sumsq_fn = double (*)(const std::byte* array, std::size_t begin, std::size_t end);
/// The stage's sum_squares (graph/stage.hpp) over elements [begin, end) of `array`, its weight
/// gradients on a device: written (add false) or added to the device double `sum`, on `stream`.
using squares_fn = void (*)(void* stage, const std::byte* array, std::size_t begin, std::size_t end, double* sum,
                            bool add, void* stream);
/// Fills [begin, end) of an array of the stage's parameter type with NaN (a floating type; no-op else).
using poison_fn = void (*)(std::byte* array, std::size_t begin, std::size_t end);
/// An OPT_STEP's call (graph/stage.hpp optimizer_ctx, erased): `params` the part it updates (its
/// first element is element `offset` of the whole), `grads` the whole weight_gradients().
struct optimizer_args {
  int stage = 0;
  std::byte* params = nullptr;
  const std::byte* grads = nullptr;
  std::size_t offset = 0, elems = 0;
  int replica = 0, replicas = 1;
  double grad_norm = -1;
  bool finite = true;
  const double* squares = nullptr;
  void* stream = nullptr;
};
using optimize_fn = void (*)(void* stage, const optimizer_args& a);

/// Where one tensor of the step's batch lies: microbatch j at `base + j · stride`.
struct feed_tensor {
  const std::byte* base = nullptr;
  std::size_t stride = 0;
};

/// What a step hands every stage call besides its op, filled by the executor at step(): the
/// batch, per source tensor (sources in stage order, each source's tensors in declaration order)
/// and per sink target tensor (likewise), and where the sinks write their losses.
struct step_feed {
  const feed_tensor* inputs = nullptr;
  const feed_tensor* targets = nullptr;
  float* losses = nullptr;  // sinks × microbatches: sink k's loss of microbatch j at k · microbatches + j
  float loss_scale = 0;     // d objective / d loss_j (batch::scale)
  int microbatches = 0;
  const std::size_t* lengths = nullptr;  // per microbatch, its length (varying tensors); nullptr: all full
  std::size_t max_length = 0;            // the length a varying tensor's declared extent holds
  bool forward_only = false;             // the plan has no backward (forward_ctx::grad is false)
};

/// What binding needs to know about one stage.
struct stage_entry {
  // first: what every call reads besides the shapes (one cache line), then the shapes
  void* obj = nullptr;
  stage_fn fn[kind_count] = {};      // by kind: F, B, I, W (nullptr: not provided)
  add_fn add = nullptr;              // stages with a weight_grad: adds one into weight_gradients()
  add_range_fn add_range = nullptr;  // the same over a range (not a stage that adds on a stream)
  std::size_t stash_elems = 0, weight_grad_elems = 0;
  std::size_t stash_size = 0, weight_grad_size = 0;  // element sizes
  bool adds_on_stream = false;                       // the stage adds them itself, on a stream (add_weight_grad)
  bool split = false;
  bool sums_outputs = false;         // its output type has += (or add_grad_output): a fan-out's gradients can be summed
  bool sums_on_stream = false;       // the stage adds them itself, on a stream (add_grad_output)
  bool varies = false;               // some tensor of in, out or target varies per microbatch (varying<...>)
  bool saves_outside_stash = false;  // keeps state for its backward outside its stash (graph/stage.hpp)
  edge_shape in, out;                // its input's and output's bytes per microbatch (a tensor, or a set)
  edge_shape target;                 // a sink's targets per microbatch (no tensors: none declared)
  std::vector<edge_shape> in_edges;  // per-edge inputs (per_edge<...>): one shape per incoming edge; else empty
  // data parallelism (host/mesh_binding.hpp); nullptr where the stage lacks the member
  bytes_fn weight_grads_of = nullptr;      // weight_gradients()
  bytes_fn params_of = nullptr;            // parameters()
  bytes_fn tied_of = nullptr;              // tied_gradients(tie)
  reduce_fn reduce = nullptr;              // over weight_grad's element type
  sumsq_fn sumsq = nullptr;                // likewise (GRAD_NORM)
  squares_fn squares = nullptr;            // sum_squares (a device's GRAD_NORM, FINITE_CHECK)
  poison_fn poison = nullptr;              // over parameters()' element type
  optimize_fn optimize = nullptr;          // optimizer_step (the step's OPT_STEP)
  std::size_t param_size = 0;              // parameters()' element size
  std::size_t param_elems = 0;             // parameters()' elements, at binding
  bool lends_params = false;               // lends_parameters: reads ctx.params (FSDP that frees)
  elem_kind grad_kind = elem_kind::other;  // weight_grad's element type, for a device's collectives
  /// The input block over incoming edge k (edge order).
  const edge_shape& in_over(int k) const { return in_edges.empty() ? in : in_edges[static_cast<std::size_t>(k)]; }
  constexpr std::size_t weight_grad_bytes() const { return weight_grad_elems * weight_grad_size; }
  constexpr std::size_t in_bytes() const { return in.bytes; }
  constexpr std::size_t out_bytes() const { return out.bytes; }
  constexpr std::size_t stash_bytes() const { return stash_elems * stash_size; }
};

/// One lowered op with its addresses resolved. `wait` > 0: before the op, the rank's stream
/// `wait_on` must have completed `wait` of its ops; `record`: after the op, publish how many of
/// this stream's ops have completed (`end`). A compute op's sizes are its stage's (`entry`).
struct bound_op {
  // Laid out by who reads it (bench/README.md, "The host walk"): the first 64 bytes are all a
  // transfer and the walk read, the next 64 all a forward adds, the rest backwards and rare
  // cases. (Not alignas(64): the padding to 256 bytes measured slower than the straddled lines.)
  // bytes 0-63: every op
  op_code code = op_code::compute;
  kind what = kind::F;
  bool record = false;
  std::uint8_t wait_on = 0;  // the stream `wait` counts ops of (a pipeline's: the other one)
  // a step with memory actions: the rank's stash slots this op frees before it runs, takes, and
  // frees after it (mesh_op::freed_before, taken, freed_after), counted in `use`; all 0 elsewhere
  std::int8_t freed_before = 0, taken = 0, freed_after = 0;
  bool counted : 1 = false;     // some of the three is not 0 (`use` is set)
  bool recomputed : 1 = false;  // a forward the step recomputes (mesh_op::scratch): forward_ctx::grad is false
  bool bucketed : 1 = false;    // `extra` is a bucketed step's marks (marks()), not parameters (params())
  int wait = 0;
  int end = 0;  // position after this op (a group: after its transfers)
  int stage = -1;
  int microbatch = -1;
  int peer = -1;  // a transfer's
  int comm = -1;
  std::byte* buf = nullptr;
  std::size_t bytes = 0;
  stage_fn fn = nullptr;
  void* obj = nullptr;
  // bytes 64-127: a compute op's
  const stage_entry* entry = nullptr;  // the stage's shapes (compute ops; a transfer: its data's stage)
  std::byte* in = nullptr;             // nullptr on a source: it reads the batch (feed)
  std::byte* out = nullptr;
  std::byte* stash = nullptr;
  void* stream = nullptr;               // handed to the stage's context (the CUDA executor's compute stream)
  std::byte* const* in_list = nullptr;  // n_inputs inputs (see below)
  int add_count = 0;                    // after the op: add this many held weight gradients, in order
  int add_begin = 0;                    // bound_rank::adds[add_begin .. + add_count)
  int feed = -1;                        // a source: its first tensor in step_feed::inputs
  int sink = -1;                        // a sink: its index among the sinks (step_feed::losses)
  // then: backwards, weight gradients, graphs
  int target = -1;      // a sink with a target: its first tensor in step_feed::targets
  int edge_input = 0;   // a transfer into or out of its stage's input: the incoming edge's position (per-edge inputs)
  int index = 0;        // position in the rank's lowered op list
  int plan_stage = -1;  // the plan's stage (`stage` is the model's: they differ in a later lane)
  std::byte* grad_out = nullptr;     // the gradient block of this stage's output (from stage + 1)
  std::byte* grad_in = nullptr;      // the gradient block of this stage's input (to stage − 1)
  std::byte* weight_grad = nullptr;  // where B/W writes this microbatch's weight gradient
  add_fn add = nullptr;
  // stages of a graph with several inputs or consumers (bind_compute): addresses in edge order,
  // in the bound rank's list pool; nullptr where `in`, `grad_in` and `grad_out` say it all
  int n_inputs = 1, n_grad_outs = 1;
  std::byte* const* grad_in_list = nullptr;   // B/I: n_inputs gradients to write
  std::byte* const* grad_out_list = nullptr;  // B/I: n_grad_outs gradients, summed into the first
  memory_use* use = nullptr;                  // where freed_before, taken and freed_after count
  // two rare things: a lending stage's gathered parameters (ctx.params), or with `bucketed` a
  // bucketed step's last weight backward on the host, its marks, which then hold the parameters
  // too (a lending stage's under FSDP). (One field, not two: 8 more bytes an op measured about
  // 8 % slower on the host walk, bench_executor's BM_static_walk.)
  void* extra = nullptr;
  const std::byte* params() const noexcept {
    return bucketed ? static_cast<const bucket_marks*>(extra)->params : static_cast<const std::byte*>(extra);
  }
  bucket_marks* marks() const noexcept { return bucketed ? static_cast<bucket_marks*>(extra) : nullptr; }
  void set_params(const std::byte* p) noexcept {
    if (bucketed)
      static_cast<bucket_marks*>(extra)->params = p;
    else
      extra = const_cast<std::byte*>(p);
  }
  void set_marks(bucket_marks* m) noexcept {
    if (m && !bucketed) m->params = static_cast<const std::byte*>(extra);  // (the parameters move into the marks)
    extra = m, bucketed = m != nullptr;
  }
};
static_assert(offsetof(bound_op, obj) + sizeof(void*) <= 64 && offsetof(bound_op, sink) + sizeof(int) <= 128,
              "bound_op: a transfer's fields are its first 64 bytes, a forward's the next 64");

namespace detail {

/// The shapes one stage call sees: its stage's, or for a microbatch with a length (varying
/// tensors, batch::lengths) those of that length.
struct call_shapes {
  const edge_shape& in;
  const edge_shape& out;
  const edge_shape& target;
  const edge_shape* in_edges = nullptr;  // per-edge inputs at a microbatch's length (nullptr: the entry's)
  const edge_shape* edges_of(const stage_entry& e) const { return in_edges ? in_edges : e.in_edges.data(); }
};

/// A stage call's body: the stage object, its op, the step's feed and the shapes it sees.
using call_body = void (*)(void* stage, const bound_op& op, const step_feed& feed, const call_shapes& sh);

// Body with the shapes of a microbatch with a length (out of line: the common call has none).
template <call_body Body>
[[gnu::noinline]] void at_length(void* s, const bound_op& op, const step_feed& feed) {
  const stage_entry& e = *op.entry;
  const std::size_t n = feed.lengths[op.microbatch], most = feed.max_length;
  const edge_shape in = shape_at(e.in, n, most), out = shape_at(e.out, n, most), target = shape_at(e.target, n, most);
  std::array<edge_shape, max_edge_inputs> edges{};
  for (std::size_t k = 0; k < e.in_edges.size() && k < edges.size(); ++k) edges[k] = shape_at(e.in_edges[k], n, most);
  Body(s, op, feed, call_shapes{in, out, target, e.in_edges.empty() ? nullptr : edges.data()});
}

/// Runs Body with the shapes of op's microbatch. (A body is a function, not a capturing lambda:
/// the common path then passes its three arguments on in registers, where a lambda's captures
/// went through the stack on every call.)
template <call_body Body>
[[gnu::always_inline]] inline void with_shapes(void* s, const bound_op& op, const step_feed& feed) {
  const stage_entry& e = *op.entry;
  if (feed.lengths && e.varies) [[unlikely]]  // (the feed first: it is at hand, the entry may not be)
    return at_length<Body>(s, op, feed);
  Body(s, op, feed, call_shapes{e.in, e.out, e.target});  // (per-edge inputs: the entry's, read where they are used)
}

/// Per edge of `p` (none for a chain), its position among its consumer's incoming edges, in edge
/// order: what picks a per-edge input's shape for a transfer over it. One pass over the edges.
inline std::vector<int> edge_input_positions(const program_view& p) {
  std::vector<int> pos(p.edges.size(), 0), seen(static_cast<std::size_t>(p.stages > 0 ? p.stages : 0), 0);
  for (std::size_t e = 0; e < p.edges.size(); ++e) pos[e] = seen[static_cast<std::size_t>(p.edges[e].to)]++;
  return pos;
}
/// The position (edge_input_positions) of transfer op `o`'s edge: 0 in a chain.
inline int transfer_edge_input(const std::vector<int>& positions, const lowered_op& o) {
  return o.link >= 0 && static_cast<std::size_t>(o.link) < positions.size()
             ? positions[static_cast<std::size_t>(o.link)]
             : 0;
}
/// The block a transfer moves, from the entry `e` of the stage that sizes it on its rank
/// (bind/layout.hpp's transfer_stage): that stage's output when it sends an activation or
/// receives a gradient, else its input over incoming edge k.
inline const edge_shape& transfer_block(const stage_entry& e, kind what, op_code code, int k) {
  const bool act = what == kind::F;
  return act == (code == op_code::send) ? e.out : e.in_over(k);
}
/// The bytes of a transfer of block `sh`: all of an activation's, a gradient's tensors that carry one.
constexpr std::size_t transfer_bytes_of(const edge_shape& sh, kind what) {
  return what == kind::F ? sh.bytes : sh.grad_bytes;
}

/// The bytes a transfer op moves for its microbatch, at the microbatch's length when its tensors
/// vary (`x.entry`: the stage that sizes it on its rank).
inline std::size_t transfer_bytes(const bound_op& x, const step_feed& feed) {
  if (feed.lengths == nullptr || x.entry == nullptr || !x.entry->varies) return x.bytes;  // (the feed first)
  const std::size_t n = feed.lengths[x.microbatch], most = feed.max_length;
  return transfer_bytes_of(shape_at(transfer_block(*x.entry, x.what, x.code, x.edge_input), n, most), x.what);
}

// A source's input or a sink's targets: per tensor, the microbatch's slice of the batch.
template <class V>
V view_of_feed(const feed_tensor* f, const edge_shape& sh, int microbatch) {
  const auto j = static_cast<std::size_t>(microbatch);
  return view_with<V>(sh, false, [&](std::size_t k) { return f[k].base + j * f[k].stride; });
}

// The op's input: its slot, or on a source the microbatch's slice of the batch.
template <class S>
[[gnu::always_inline]] inline input_view_t<S> input_of(const bound_op& op, const step_feed& feed,
                                                       const edge_shape& sh) {
  using V = input_view_t<S>;
  if (op.in) [[likely]]
    return view_at<V>(static_cast<const std::byte*>(op.in), sh, false);
  if (op.feed < 0 || feed.inputs == nullptr) return V{};
  return view_of_feed<V>(feed.inputs + op.feed, sh, op.microbatch);
}

// Every input, in edge order: `one` (the op's input) unless the op has several.
template <class S>
[[gnu::always_inline]] inline inputs_view_t<S> inputs_of(const bound_op& op, const call_shapes& sh,
                                                         input_view_t<S> one) {
  if constexpr (has_per_edge_inputs<S>) {  // one type per incoming edge
    if (op.in_list) return {op.in_list, op.n_inputs, sh.edges_of(*op.entry), false};
    return {&op.in, op.in ? 1 : 0, sh.edges_of(*op.entry), false};
  } else {
    if (op.in_list) return {op.in_list, op.n_inputs, &sh.in, false};
    return {one, 1};
  }
}
// The gradients a backward writes for its inputs, in edge order (none: `wanted` false).
template <class S>
[[gnu::always_inline]] inline grad_inputs_view_t<S> grad_inputs_of(const bound_op& op, const call_shapes& sh,
                                                                   grad_input_view_t<S> one, bool wanted) {
  if constexpr (has_per_edge_inputs<S>) {
    if (!wanted) return {};
    if (op.grad_in_list) return {op.grad_in_list, op.n_inputs, sh.edges_of(*op.entry), true};
    return {&op.grad_in, op.grad_in ? 1 : 0, sh.edges_of(*op.entry), true};
  } else {
    if (op.grad_in_list && wanted) return {op.grad_in_list, op.n_inputs, &sh.in, true};
    return {one, wanted ? 1 : 0};
  }
}

// A sink's targets for the op's microbatch (empty without a target or a feed of them).
template <class S>
target_view_t<S> target_view_of(const bound_op& op, const step_feed& feed, const edge_shape& sh) {
  if constexpr (!has_target<S>) {
    return {};
  } else {
    if (op.target < 0 || feed.targets == nullptr) return {};
    return view_of_feed<target_view_t<S>>(feed.targets + op.target, sh, op.microbatch);
  }
}

// A lending stage's gathered parameters for this call (ctx.params), or empty.
template <class S>
[[gnu::always_inline]] inline std::span<const param_t<S>> params_of_op(const bound_op& op) {
  if constexpr (lends_parameters<S>) {
    if (const std::byte* p = op.params()) [[unlikely]]
      return {reinterpret_cast<const param_t<S>*>(p), op.entry->param_elems};
  }
  return {};
}

template <class S>
[[gnu::always_inline]] inline forward_ctx<S> make_forward(const bound_op& op, const step_feed& feed,
                                                          const call_shapes& sh) {
  const stage_entry& e = *op.entry;
  const input_view_t<S> in = input_of<S>(op, feed, sh.in);
  return {op.stage,
          op.microbatch,
          in,
          view_at<output_view_t<S>>(op.out, sh.out, false),
          {reinterpret_cast<stash_t<S>*>(op.stash), op.stash ? e.stash_elems : 0},
          op.stream,
          inputs_of<S>(op, sh, in),
          target_view_of<S>(op, feed, sh.target),
          op.sink >= 0 && feed.losses ? feed.losses + op.sink * feed.microbatches + op.microbatch : nullptr,
          !feed.forward_only && !op.recomputed,
          params_of_op<S>(op)};
}
/// Buckets marks.done … b of a bucketed backward's weight gradient are written: their parts of
/// its held weight gradients are added into weight_gradients() (each element's sum in the same
/// order as a whole add), and each bucket published for the reductions that wait for it.
inline void add_buckets_through(bucket_marks& k, int b) {
  for (; k.done <= b && k.done < k.signal.buckets; ++k.done) {
    const shard_range part = bucket_of(k.elems, k.signal.buckets, k.done);
    for (int a = 0; a < k.add_count; ++a) k.add_range(k.stage, k.adds[a], part.begin, part.end);
    if (k.publish) k.publish(k.at, k.first + k.done);
  }
}
inline void buckets_ready_call(void* marks, int b) { add_buckets_through(*static_cast<bucket_marks*>(marks), b); }
/// A bucketed step's last weight backward on the host, as its op's fn (it has no adds of its own
/// then): the stage's call, which may add and release its buckets as it writes them
/// (backward_ctx::gradients_ready), then the buckets it did not, in order. The walk calls it as any
/// compute, so a step without buckets pays nothing for them.
inline void run_bucketed(void* stage, const bound_op& op, const step_feed& feed) {
  bucket_marks& k = *op.marks();
  k.done = 0;
  k.call(stage, op, feed);
  add_buckets_through(k, k.signal.buckets - 1);
}

template <class S>
[[gnu::always_inline]] inline backward_ctx<S> make_backward(const bound_op& op, const step_feed& feed,
                                                            const call_shapes& sh, bool input_part, bool weight_part) {
  using GI = grad_input_view_t<S>;
  const stage_entry& e = *op.entry;
  // (a fan-in whose first edge is detached writes no gradient there, but does for the others: a
  // list without a first entry still counts)
  const bool gi = input_part && (op.grad_in != nullptr || op.grad_in_list != nullptr);
  const bool wg = weight_part && op.weight_grad != nullptr;
  const GI grad_in = view_at<GI>(input_part ? op.grad_in : nullptr, sh.in, true);
  const input_view_t<S> in = input_of<S>(op, feed, sh.in);
  return {op.stage,
          op.microbatch,
          in,
          view_at<grad_output_view_t<S>>(static_cast<const std::byte*>(op.grad_out), sh.out, true),
          grad_in,
          {reinterpret_cast<stash_t<S>*>(op.stash), op.stash ? e.stash_elems : 0},
          {reinterpret_cast<weight_grad_t<S>*>(op.weight_grad), wg ? e.weight_grad_elems : 0},
          op.stream,
          inputs_of<S>(op, sh, in),
          grad_inputs_of<S>(op, sh, grad_in, gi),
          target_view_of<S>(op, feed, sh.target),
          op.sink >= 0 ? feed.loss_scale : 0.0f,
          params_of_op<S>(op),
          weight_part && op.bucketed ? &op.marks()->signal : nullptr};
}

/// Every gradient-carrying tensor of the stage's output has `+=` (a fan-out's gradients are summed).
template <class S>
constexpr bool sums_outputs_impl() {
  using X = typename S::output;
  return []<std::size_t... K>(std::index_sequence<K...>) {
    return ((!member_t<X, K>::grad || requires(typename tensor_t<X, K>::value_type & a,
                                               const typename tensor_t<X, K>::value_type& b) { a += b; }) &&
            ...);
  }
  (std::make_index_sequence<static_cast<std::size_t>(set_traits<X>::count)>{});
}
template <class S>
inline constexpr bool sums_outputs_v = sums_outputs_impl<S>();

// A fan-out's gradients, one per consumer edge: added into the first, in edge order, before the
// backward (or backward_input) reads it; backward_weight then reads the sum there. The stage's
// add_grad_output does the adding where it has one (on its stream), else `+=` on the host, per
// gradient-carrying tensor.
// (Out of line: most backwards have one consumer, and the loop's registers would make every
// backward save and restore them.)
template <class S>
[[gnu::noinline]] void sum_grad_outputs_of(S& st, const bound_op& op, const edge_shape& sh) {
  if constexpr (adds_grad_output_on_stream<S> || sums_outputs_v<S>) {
    for (int k = 1; k < op.n_grad_outs; ++k) {
      const std::byte* x = op.grad_out_list[k];
      if constexpr (adds_grad_output_on_stream<S>) {
        st.add_grad_output(view_at<view_t<typename S::output, false>>(op.grad_out, sh, true),
                           view_at<grad_output_view_t<S>>(x, sh, true), op.stream);
      } else {
        using X = typename S::output;
        [&]<std::size_t... K>(std::index_sequence<K...>) {
          (
              [&] {
                using T = typename tensor_t<X, K>::value_type;
                const tensor_place& p = sh.t[K];
                if constexpr (member_t<X, K>::grad) {
                  T* into = reinterpret_cast<T*>(op.grad_out + p.grad_offset);
                  const T* from = reinterpret_cast<const T*>(x + p.grad_offset);
                  for (std::size_t i = 0; i < p.elems; ++i) into[i] += from[i];
                }
              }(),
              ...);
        }
        (std::make_index_sequence<static_cast<std::size_t>(set_traits<X>::count)>{});
      }
    }
  }
}
template <class S>
[[gnu::always_inline]] inline void sum_grad_outputs(S& st, const bound_op& op, const edge_shape& sh) {
  if constexpr (adds_grad_output_on_stream<S> || sums_outputs_v<S>)
    if (op.n_grad_outs > 1 && op.grad_out_list != nullptr) [[unlikely]]
      sum_grad_outputs_of(st, op, sh);
}

template <class S>
[[gnu::always_inline]] inline void forward_body(void* s, const bound_op& op, const step_feed& feed,
                                                const call_shapes& sh) {
  static_cast<S*>(s)->forward(make_forward<S>(op, feed, sh));
}
template <class S>
[[gnu::always_inline]] inline void backward_body(void* s, const bound_op& op, const step_feed& feed,
                                                 const call_shapes& sh) {
  S& st = *static_cast<S*>(s);
  sum_grad_outputs(st, op, sh.out);
  if constexpr (has_full_backward<S>) {
    st.backward(make_backward<S>(op, feed, sh, true, true));
  } else {
    st.backward_input(make_backward<S>(op, feed, sh, true, false));
    st.backward_weight(make_backward<S>(op, feed, sh, false, true));
  }
}
template <class S>
[[gnu::always_inline]] inline void backward_input_body(void* s, const bound_op& op, const step_feed& feed,
                                                       const call_shapes& sh) {
  S& st = *static_cast<S*>(s);
  sum_grad_outputs(st, op, sh.out);
  st.backward_input(make_backward<S>(op, feed, sh, true, false));
}
template <class S>
[[gnu::always_inline]] inline void backward_weight_body(void* s, const bound_op& op, const step_feed& feed,
                                                        const call_shapes& sh) {
  static_cast<S*>(s)->backward_weight(make_backward<S>(op, feed, sh, false, true));
}

template <class S>
void run_forward(void* s, const bound_op& op, const step_feed& feed) {
  with_shapes<&forward_body<S>>(s, op, feed);
}
template <class S>
void run_backward(void* s, const bound_op& op, const step_feed& feed) {
  with_shapes<&backward_body<S>>(s, op, feed);
}
template <class S>
void run_backward_input(void* s, const bound_op& op, const step_feed& feed) {
  with_shapes<&backward_input_body<S>>(s, op, feed);
}
template <class S>
void run_backward_weight(void* s, const bound_op& op, const step_feed& feed) {
  with_shapes<&backward_weight_body<S>>(s, op, feed);
}
/// Adds elements [begin, end) of one microbatch's weight gradient `g` into weight_gradients().
template <class S>
void add_weight_grad_range(void* s, const std::byte* g, std::size_t begin, std::size_t end) {
  const std::span<weight_grad_t<S>> acc = static_cast<S*>(s)->weight_gradients();
  const auto* x = reinterpret_cast<const weight_grad_t<S>*>(g);
  for (std::size_t i = begin; i < end; ++i) acc[i] += x[i];
}

template <class S>
void add_weight_grad(void* s, const std::byte* g, void* stream) {
  S& st = *static_cast<S*>(s);
  const std::size_t n = st.weight_gradients().size();
  if constexpr (adds_weight_grad_on_stream<S>)
    st.add_weight_grad(std::span<const weight_grad_t<S>>(reinterpret_cast<const weight_grad_t<S>*>(g), n), stream);
  else
    add_weight_grad_range<S>(s, g, 0, n);
}

template <class T>
double sum_of_squares(const std::byte* a, std::size_t begin, std::size_t end) {
  const auto* x = reinterpret_cast<const T*>(a);
  double s = 0;
  for (std::size_t i = begin; i < end; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

template <class T>
std::span<std::byte> as_bytes_span(std::span<T> x) {
  return {reinterpret_cast<std::byte*>(x.data()), x.size_bytes()};
}
template <class S>
std::span<std::byte> weight_grads_bytes(void* s, int) {
  return as_bytes_span(std::span<weight_grad_t<S>>(static_cast<S*>(s)->weight_gradients()));
}
template <class S>
std::span<std::byte> params_bytes(void* s, int) {
  return as_bytes_span(static_cast<S*>(s)->parameters());
}
template <class S>
std::span<std::byte> tied_bytes(void* s, int tie) {
  return as_bytes_span(std::span<weight_grad_t<S>>(static_cast<S*>(s)->tied_gradients(tie)));
}
template <class T>
void reduce_parts(std::byte* const* parts, int n, std::size_t begin, std::size_t end, int keep_begin, int keep_end) {
  for (std::size_t i = begin; i < end; ++i) {
    T v = reinterpret_cast<const T*>(parts[0])[i];
    for (int k = 1; k < n; ++k) v += reinterpret_cast<const T*>(parts[k])[i];
    for (int k = keep_begin; k < keep_end; ++k) reinterpret_cast<T*>(parts[k])[i] = v;
  }
}
template <class S>
void run_optimizer_step(void* s, const optimizer_args& a) {
  const auto* g = reinterpret_cast<const weight_grad_t<S>*>(a.grads) + a.offset;
  static_cast<S*>(s)->optimizer_step(optimizer_ctx<S>{a.stage,
                                                      {reinterpret_cast<param_t<S>*>(a.params), a.elems},
                                                      {g, a.elems},
                                                      a.offset,
                                                      a.replica,
                                                      a.replicas,
                                                      a.grad_norm,
                                                      a.finite,
                                                      a.squares,
                                                      a.stream});
}
template <class S>
void run_sum_squares(void* s, const std::byte* array, std::size_t begin, std::size_t end, double* sum, bool add,
                     void* stream) {
  const auto* x = reinterpret_cast<const weight_grad_t<S>*>(array);
  static_cast<S*>(s)->sum_squares(std::span<const weight_grad_t<S>>(x + begin, end - begin), sum, add, stream);
}
template <class T>
void poison_range(std::byte* array, std::size_t begin, std::size_t end) {
  if constexpr (std::is_floating_point_v<T>)
    for (std::size_t i = begin; i < end; ++i) reinterpret_cast<T*>(array)[i] = std::numeric_limits<T>::quiet_NaN();
}

/// The stage's array a mesh step's collective works on — `params`: parameters() (a gather, a
/// release); else weight_gradients(), or with tie ≥ 0 tied_gradients(tie) — as bytes, with its
/// element size in `size`; shape_error (prefixed `who`) naming what the stage lacks.
inline std::span<std::byte> collective_array(const stage_entry& e, bool params, int tie, int stage, std::size_t& size,
                                             const std::string& who) {
  const std::string at = who + ": stage " + std::to_string(stage);
  if (params) {
    if (!e.params_of)
      throw shape_error(at +
                        " has no parameters() for FSDP (dp_options::shard) to gather and release: give it "
                        "`std::span<T> parameters()`");
    size = e.param_size;
    return e.params_of(e.obj, tie);
  }
  if (!e.weight_grads_of || !e.reduce)
    throw shape_error(at +
                      " hands no weight gradients to pipetype, so the replicas could not reduce them: declare "
                      "`using weight_grad = pipetype::tensor<T, N>;` and `std::span<T> weight_gradients();` (a "
                      "stage without parameters: N = 0 and an empty span)");
  size = e.weight_grad_size;
  if (tie < 0) return e.weight_grads_of(e.obj, tie);
  if (!e.tied_of)
    throw shape_error(at + " is in tie group " + std::to_string(tie) +
                      " but has no `std::span<T> tied_gradients(int tie)` saying where the tied gradient is");
  return e.tied_of(e.obj, tie);
}

/// A stage that lends its parameters (FSDP): its own parameters() as bytes, which an executor
/// copies its replica's shard out of at binding; shape_error (`at` names the stage, "pipetype::host:
/// stage 3") when they are not the size the model was bound with.
inline std::span<std::byte> lent_array(const stage_entry& e, const std::string& at) {
  const std::span<std::byte> own = e.params_of(e.obj, -1);
  if (own.size() != e.param_elems * e.param_size)
    throw shape_error(at + "'s parameters() has " + std::to_string(own.size() / e.param_size) + " elements, " +
                      std::to_string(e.param_elems) + " when the model was bound");
  return own;
}

/// A rank's parameter slot under FSDP: the bytes of the largest stage it holds that lends its
/// parameters (`holds(s)`: plan stage s is on the rank), rounded up to `align`; 0 when none lends.
template <class Holds, class EntryOf>
std::size_t lent_slot_bytes(int stages, Holds&& holds, EntryOf&& entry_of, std::size_t align) {
  std::size_t most = 0;
  for (int s = 0; s < stages; ++s)
    if (holds(s) && entry_of(s).lends_params) {
      const std::size_t n = entry_of(s).param_elems * entry_of(s).param_size;
      most = std::max(most, (n + align - 1) / align * align);
    }
  return most;
}

/// The elements of stage `e`'s parameters that an OPT_STEP of replica `replica` of `replicas`
/// updates: its shard when the step's reductions scatter (ZeRO-1, FSDP), else all of them;
/// shape_error (prefixed `who`) for a stage with parameters and no optimizer_step, or with
/// parameters and gradients of different sizes. (A stage with neither needs no hook.)
inline shard_range optimizer_part(const stage_entry& e, int stage, bool scattered, int replicas, int replica,
                                  const std::string& who) {
  const std::string at = who + ": stage " + std::to_string(stage);
  if (!e.optimize && (e.param_elems > 0 || e.weight_grad_elems > 0))
    throw shape_error(at +
                      " has no `void optimizer_step(const pipetype::optimizer_ctx<S>&)` for the step's OPT_STEP "
                      "(dp_options::optimizer, zero)");
  if (e.param_elems != e.weight_grad_elems)
    throw shape_error(at + "'s parameters() has " + std::to_string(e.param_elems) +
                      " elements and its weight gradients " + std::to_string(e.weight_grad_elems) +
                      ": an OPT_STEP updates them element for element");
  return scattered ? shard_of(e.param_elems, replicas, replica) : shard_range{0, e.param_elems};
}

// A per-edge-input stage's shape over incoming edge E: its type's static extents, or the stage's
// input_extent(E, k) for a dynamic one. (One function per edge: clang 14 crashes on a pack
// expanded through nested lambdas.)
template <class S, std::size_t E>
edge_shape per_edge_shape(const S& s) {
  using X = std::tuple_element_t<E, typename per_edge_traits<typename S::inputs>::types>;
  constexpr bool asks = requires(const S& stage_obj) { stage_obj.input_extent(E, std::size_t{0}); };
  static_assert(!any_dynamic<X>() || asks,
                "pipetype::stage: a dynamic per-edge input needs a member "
                "std::size_t input_extent(std::size_t edge, std::size_t k) const");
  return shape_of<X>([&](std::size_t tensor_index) {
    return set_extent<X>(s, tensor_index, [](const S& stage_obj, std::size_t k) {
      if constexpr (asks)
        return std::size_t(stage_obj.input_extent(E, k));
      else
        return std::size_t{0};
    });
  });
}
template <class S, std::size_t... E>
std::vector<edge_shape> per_edge_shapes_of(const S& s, std::index_sequence<E...>) {
  return {per_edge_shape<S, E>(s)...};
}
// A per-edge-input stage's shapes, one per incoming edge (none for the others).
template <class S>
std::vector<edge_shape> per_edge_shapes(const S& s) {
  if constexpr (has_per_edge_inputs<S>)
    return per_edge_shapes_of(
        s, std::make_index_sequence<std::tuple_size_v<typename per_edge_traits<typename S::inputs>::types>>{});
  else
    return {};
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
    if constexpr (!adds_weight_grad_on_stream<S>) e.add_range = &add_weight_grad_range<S>;
    e.adds_on_stream = adds_weight_grad_on_stream<S>;
    e.weight_grad_elems = weight_grad_extent(s);
    e.weight_grad_size = sizeof(weight_grad_t<S>);
    if (s.weight_gradients().size() != e.weight_grad_elems)
      throw shape_error("pipetype: a stage's weight_gradients() has " + std::to_string(s.weight_gradients().size()) +
                        " elements, its weight_grad " + std::to_string(e.weight_grad_elems));
  }
  if constexpr (has_weight_grad<S>) {
    e.weight_grads_of = &weight_grads_bytes<S>;
    if constexpr (requires(weight_grad_t<S> & a, const weight_grad_t<S>& b) { a += b; })
      e.reduce = &reduce_parts<weight_grad_t<S>>;
    if constexpr (std::is_arithmetic_v<weight_grad_t<S>> || std::is_same_v<weight_grad_t<S>, half> ||
                  std::is_same_v<weight_grad_t<S>, bfloat16>)
      e.sumsq = &sum_of_squares<weight_grad_t<S>>;
    e.grad_kind = elem_kind_of<weight_grad_t<S>>();
    if constexpr (sums_squares_on_stream<S>) e.squares = &run_sum_squares<S>;
  }
  if constexpr (has_tied_gradients<S>) e.tied_of = &tied_bytes<S>;
  if constexpr (has_parameters<S>) {
    using P = typename decltype(s.parameters())::element_type;
    e.params_of = &params_bytes<S>;
    e.poison = &poison_range<P>;
    e.param_size = sizeof(P);
    e.param_elems = s.parameters().size();
    e.lends_params = lends_parameters<S>;
    if constexpr (has_optimizer_step<S>) e.optimize = &run_optimizer_step<S>;
  }
  e.in = input_shape(s);
  e.out = output_shape(s);
  e.target = target_shape(s);
  e.in_edges = per_edge_shapes(s);
  e.varies = e.in.varies || e.out.varies || e.target.varies;
  e.stash_elems = stash_extent(s);
  e.saves_outside_stash = saves_outside_stash<S>;
  e.sums_on_stream = adds_grad_output_on_stream<S>;
  e.sums_outputs = sums_outputs_v<S> || e.sums_on_stream;
  e.stash_size = sizeof(stash_t<S>);
  return e;
}

}  // namespace detail

namespace detail {

/// Stage `Stage` of a dag feeds `Consumers` stages: with more than one, pipetype sums their
/// gradients into one, so its output elements need += (or the stage an add_grad_output).
template <int Stage, int Consumers, class S>
struct fan_out_sums {
  static_assert(Consumers < 2 || sums_outputs_v<S> || adds_grad_output_on_stream<S>,
                "pipetype: this stage's output feeds several stages, so pipetype sums their gradients (in edge order) "
                "before its backward; its output element type needs += or the stage a member "
                "add_grad_output(std::span<T> into, std::span<const T> g, void* stream) (Stage in "
                "fan_out_sums<Stage, ...>)");
  static constexpr bool value = true;
};

/// How many stages read stage s of M's graph (a function, so that clang frees the list before
/// the count becomes a template argument).
template <class M>
constexpr int consumers_in(int s) {
  return static_cast<int>(successors(M::topology(), s).size());
}

template <class M, std::size_t... I>
constexpr bool fan_outs_sum(std::index_sequence<I...>) {
  return (fan_out_sums<static_cast<int>(I), consumers_in<M>(static_cast<int>(I)),
                       std::remove_cvref_t<decltype(std::declval<M&>().template stage<I>())>>::value &&
          ...);
}

}  // namespace detail

/// The stages of a model (a chain, uniform_chain or dag), as the executors bind them, in index
/// order. A dag's stage that feeds several stages must have an output type with += (pipetype sums
/// their gradients for it): a compile error names the stage otherwise.
template <class M>
std::vector<stage_entry> entries_of(M& model) {
  if constexpr (requires { M::is_graph; })
    static_assert(detail::fan_outs_sum<M>(std::make_index_sequence<M::stages>{}));
  std::vector<stage_entry> out;
  out.reserve(static_cast<std::size_t>(model.size()));
  model.for_each_stage([&](int, auto& s) { out.push_back(detail::entry_of(s)); });
  return out;
}

}  // namespace pipetype
