// pipetype/graph/stage.hpp — what a stage is: the user's piece of the model.
//
// A stage is a type the user writes. It declares the activation it takes and the one it gives
// (element type and element count per microbatch), optionally a per-microbatch `stash` for what
// its backward needs besides its input, and provides
//
//   void forward(const pipetype::forward_ctx<S>&);
//   void backward(const pipetype::backward_ctx<S>&);                 // full backward, and/or
//   void backward_input(const pipetype::backward_ctx<S>&);           // the split of zero-bubble
//   void backward_weight(const pipetype::backward_ctx<S>&);          // schedules (I, then W)
//
// pipetype owns when these run and where their buffers live (the plan's slots, allocated once);
// the user owns parameters, their gradients and the optimizer. A context holds spans into those
// buffers, valid for the call only:
//
//   forward:   input (stage 0: the microbatch's slice of the batch given to step()),
//              output (empty on the last stage, which computes its loss, unless the executor
//              keeps the sinks' outputs: executor_options::keep_outputs; a loss of local learning
//              whose output travels on over a detached edge writes it there too), stash, grad (false in
//              a forward-only plan, where no backward follows: a stage that keeps state for its
//              backward outside the stash keeps none)
//   backward:  input (the same values forward saw), grad_output (the gradient of the output;
//              empty on the last stage: the gradient comes from its own loss), grad_input (to be
//              written; empty on stage 0 and in backward_weight), stash (what forward left)
//
// Sinks and losses. A sink (a stage whose output nobody reads: a chain's last, a graph's losses)
// may declare `using target = tensor<...>` (or a tensors<...> set): the batch gives its targets
// (bind/batch.hpp) and both contexts hold this microbatch's as `target`. Its forward writes the
// microbatch's loss to `*ctx.loss`; its backward seeds the gradient with `ctx.loss_scale`, the
// gradient of the step's objective with respect to that loss (the batch's loss_scaling), so the
// weight gradients are the objective's. step() returns the losses. On a stage that is no sink
// (a uniform_chain's stages share one type) `target` is empty, `loss` nullptr, `loss_scale` 0.
//
//   struct block {
//     using input  = pipetype::tensor<float, 4, 64>;    // 4 rows × 64 features per microbatch
//     using output = pipetype::tensor<float, 4, 64>;
//     using stash  = pipetype::tensor<float, 4, 64>;    // optional
//     void forward(const pipetype::forward_ctx<block>& c);
//     void backward(const pipetype::backward_ctx<block>& c);
//   };
//
// Stage graphs (graph/dag.hpp). A stage with several incoming edges takes one input per edge,
// each of its `input` type — or, when its edges carry different types (an image tower and a token
// tower into one head), declares `using inputs = pipetype::per_edge<A, B, ...>;` (one type per
// incoming edge, in edge order; its `input` is then A) and reads them as `inputs.get<K>()`,
// writing gradients to `grad_inputs.get<K>()` (a dynamic one sized by a member
// `std::size_t input_extent(std::size_t edge, std::size_t k) const`). A stage with several
// outgoing edges gives one output that every consumer reads. The contexts list them in edge order
// (the order the edges are declared):
//
//   forward:   inputs[k]: the input over the stage's k-th incoming edge (inputs[0] is `input`;
//              a source's one input is its slice of the batch)
//   backward:  inputs (the same), grad_inputs[k]: the gradient to write for the k-th input
//              (grad_inputs[0] is `grad_input`; none on a source and in backward_weight), and
//              grad_output: the sum, in edge order, of the gradients every consumer sent back
//              (pipetype adds them, left to right, before the stage runs, so the sum is the same
//              under every schedule)
//
// The adding needs the output's element type to have `+=` (run on the host), or the stage's own
//   void add_grad_output(std::span<T> into, std::span<const T> g, void* stream);
// which pipetype then calls for every gradient after the first, in edge order, with `into` the
// first: a device executor needs it (the gradients live in device memory: launch the add on
// `stream`); host executors call it too when it exists (the concept adds_grad_output_on_stream).
//
// A chain's stage sees one input and one grad_input in these lists, the same spans as `input` and
// `grad_input`: code written for a chain runs unchanged.
//
// Several tensors per edge: `input` and `output` may be a set, `pipetype::tensors<tensor<...>,
// no_grad<tensor<...>>, ...>` (graph/tensors.hpp); the context's input, output, grad_input and
// grad_output are then span_sets (`c.input.get<0>()`, `auto [h, ids] = c.input;`), and gradients
// travel only for the tensors not marked no_grad. A stash and a weight_grad are one tensor.
//
// Sizes known only at run time: declare `tensor<T, pipetype::dynamic>` and give the stage a
// member `std::size_t input_extent() const` (output_extent, stash_extent likewise; for a set,
// `std::size_t input_extent(std::size_t k) const` gives tensor k's). Sizes are 64-bit.
//
// Optional members are found by name, so pipetype guards the spellings: a stage that uses a
// stash (or ctx.weight_grad) it does not declare fails to compile with a sentence saying so, and
// chain / uniform_chain of a type that is not a stage name the member that is missing or half
// there (backward_input without backward_weight, weight_gradients() without weight_grad, ...).
//
// Gradient accumulation. A stage either adds its weight gradients into its own accumulators
// (then the schedule must run its B/W in microbatch order, which the executor checks), or it
// declares `using weight_grad = tensor<T, N>` and `std::span<T> weight_gradients()`: backward
// (or backward_weight) then *writes* microbatch j's weight gradient to ctx.weight_grad and
// pipetype adds it into weight_gradients() in microbatch order, holding early ones back when the
// schedule runs backwards out of order (looped BFS). Either way every schedule gives bitwise the
// same gradients.
//
// Data parallelism (a mesh executor, docs/12_data_parallel.md) reduces what pipetype can see: a
// stage there hands its weight gradients to pipetype (weight_grad and weight_gradients()), whose
// REDUCE_GRAD sums over the replicas. Two more optional members serve the rest:
//   std::span<P> parameters();              FSDP (sharded) gathers them before the stage runs
//                                           (UNSHARD) and releases the shards a replica does
//                                           not own after (RESHARD)
//   std::span<T> tied_gradients(int tie);   a stage in tie group `tie` (dp_options::ties): the
//                                           part of weight_gradients() that holds the tied
//                                           parameter's gradient, summed over the group's stages
// FSDP that frees memory: a stage with parameters() that also says
//   static constexpr bool lends_parameters = true;
// reads its parameters from ctx.params whenever that is not empty. A host mesh executor with
// sharded parameters then holds them itself: at binding it copies each replica's own shard out of
// parameters() and never reads or writes that array again (the stage may free it); an UNSHARD
// gathers the shards into a slot of the rank's parameter pool, which the plan sizes
// (mesh/lower.hpp: at most the window), and every call of the stage until its RESHARD gets that
// slot as ctx.params. The optimizer then updates the shard (mesh_executor::parameter_shard).
// Elsewhere (no FSDP, one replica, the device executor) ctx.params is empty.
//
// The optimizer in the step (dp_options::optimizer; ZeRO-1, dp_options::zero, implies it): a stage
// with parameters() and weight gradients of as many elements gives
//   void optimizer_step(const pipetype::optimizer_ctx<S>& c);
// and the step's OPT_STEP calls it once per step, on the data-parallel stream, after the stage's
// gradients are reduced (and GRAD_NORM, whose norm it gets, and FINITE_CHECK, whether every
// gradient was finite: ctx.finite false says skip this update) and after its last compute: it updates
// c.params from c.grads (elements c.offset … of the whole), keeping its optimizer's state for those
// elements only. With ZeRO-1 that is the replica's shard, and PARAM_SYNC then gathers every
// replica's; with FSDP the shard too (the one pipetype holds, when the stage lends it). It leaves
// the gradients as they are (zeroing them for the next step is the caller's, as in PyTorch). The
// host mesh executor runs it on its data-parallel thread; the device executor calls it as its walk
// reaches the OPT_STEP, with the data-parallel stream as ctx.stream (launch the update there).
//
// Memory actions (docs/13_memory.md) move what a stage keeps for its backward: its stash and its
// input. A stage that keeps more outside the stash (a LibTorch module's autograd graph) says so
// with `static constexpr bool saves_outside_stash = true;`: a step then may not OFFLOAD its
// microbatches unless it recomputes them (their inputs may still be offloaded), and a forward
// that the step recomputes runs with ctx.grad false, so it keeps nothing; its RECOMPUTE's forward,
// with ctx.grad true, builds what the backward needs.
#pragma once

#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

#include "pipetype/core/mesh.hpp"
#include "pipetype/graph/tensors.hpp"

namespace pipetype {

namespace detail {
template <class T>
inline constexpr bool always_false_stage_v = false;

/// The element type of a stash a stage does not declare: any use of one as data is a compile
/// error that says so (a misspelled `using stash = ...` would otherwise leave an empty span,
/// and the stage would write past it).
struct undeclared_stash {
  template <class T>
  undeclared_stash& operator=(const T&) {
    static_assert(always_false_stage_v<T>,
                  "pipetype: this stage writes its stash but declares none: add `using stash = "
                  "pipetype::tensor<T, N...>;` (is it misspelled?)");
    return *this;
  }
  template <class T>
  operator T() const {
    static_assert(always_false_stage_v<T>,
                  "pipetype: this stage reads its stash but declares none: add `using stash = "
                  "pipetype::tensor<T, N...>;` (is it misspelled?)");
    return T{};
  }
};
/// The same for a weight gradient a stage does not declare.
struct undeclared_weight_grad {
  template <class T>
  undeclared_weight_grad& operator=(const T&) {
    static_assert(always_false_stage_v<T>,
                  "pipetype: this stage writes ctx.weight_grad but declares no weight_grad: add `using weight_grad = "
                  "pipetype::tensor<T, N>;` and `std::span<T> weight_gradients();` (is it misspelled?)");
    return *this;
  }
  template <class T>
  operator T() const {
    static_assert(always_false_stage_v<T>,
                  "pipetype: this stage reads ctx.weight_grad but declares no weight_grad: add `using weight_grad = "
                  "pipetype::tensor<T, N>;` (is it misspelled?)");
    return T{};
  }
};

/// The element type of ctx.params for a stage without parameters(): reading one is a compile
/// error that says so.
struct undeclared_params {
  template <class T>
  operator T() const {
    static_assert(always_false_stage_v<T>,
                  "pipetype: this stage reads ctx.params but has no parameters(): give it `std::span<T> "
                  "parameters();` and `static constexpr bool lends_parameters = true;`");
    return T{};
  }
};
template <class S>
struct param_of {
  using type = undeclared_params;
};
template <class S>
requires requires(S& s) { typename std::remove_cvref_t<decltype(s.parameters())>::element_type; }
struct param_of<S> {
  using type =
      std::remove_const_t<typename std::remove_cvref_t<decltype(std::declval<S&>().parameters())>::element_type>;
};

template <class S>
struct stash_of {
  using type = tensor<undeclared_stash, 0>;
};
template <class S>
requires requires { typename S::stash; }
struct stash_of<S> {
  using type = typename S::stash;
};
/// The input a stage declares: `input`, or the first of `inputs` (per_edge<...>); no `type`
/// when it declares neither (then it is no stage).
template <class S>
struct input_decl {};
template <class S>
requires requires { typename S::input; }
struct input_decl<S> {
  using type = typename S::input;
};
template <class S>
requires(!requires { typename S::input; }) && requires { typename per_edge_traits<typename S::inputs>::types; }
struct input_decl<S> {
  using type = std::tuple_element_t<0, typename per_edge_traits<typename S::inputs>::types>;
};
template <class S>
using input_decl_t = typename input_decl<S>::type;

/// How many per-edge input types S declares (0: none, or `inputs` is no per_edge<...>).
template <class S>
constexpr int per_edge_count() {
  if constexpr (requires { typename S::inputs; })
    return per_edge_traits<typename S::inputs>::count;
  else
    return 0;
}
template <class S>
constexpr bool per_edge_invalid() {
  if constexpr (requires { typename S::inputs; })
    return !per_edge_traits<typename S::inputs>::valid;
  else
    return false;
}

template <class S>
struct target_of {  // a stage without a target: no tensor
  using type = tensor<std::byte, 0>;
};
template <class S>
requires requires { typename S::target; }
struct target_of<S> {
  using type = typename S::target;
};
template <class S>
struct weight_grad_of {
  using type = tensor<undeclared_weight_grad, 0>;
};
template <class S>
requires requires { typename S::weight_grad; }
struct weight_grad_of<S> {
  using type = typename S::weight_grad;
};
}  // namespace detail

/// Element types of a stage's input and output (a single tensor's; a set has one per tensor:
/// detail::tensor_t<S::input, K>), stash and weight gradient.
template <class S>
using input_t = typename detail::input_decl_t<S>::value_type;
template <class S>
using output_t = typename S::output::value_type;
template <class S>
using stash_tensor_t = typename detail::stash_of<S>::type;
template <class S>
using stash_t = typename stash_tensor_t<S>::value_type;
template <class S>
using weight_grad_tensor_t = typename detail::weight_grad_of<S>::type;
template <class S>
using weight_grad_t = typename weight_grad_tensor_t<S>::value_type;
/// The element type of a stage's parameters() (ctx.params).
template <class S>
using param_t = typename detail::param_of<S>::type;

/// A sink's targets per microbatch (`using target = tensor<...>` or a tensors<...> set), which
/// the batch gives (bind/batch.hpp) and its forward and backward read. A stage without one has
/// the empty tensor<std::byte, 0>.
template <class S>
concept has_target = requires {
  typename S::target;
};
template <class S>
using target_tensor_t = typename detail::target_of<S>::type;
template <class S>
using target_view_t = detail::view_t<target_tensor_t<S>, true>;

/// What a stage's context holds for its input and output: a std::span for a single tensor, a
/// span_set for a set (graph/tensors.hpp). `grad_input_view_t` is the gradient it writes for its
/// input (an empty span for each no_grad tensor); `grad_output_view_t` the one it receives.
template <class S>
using input_view_t = detail::view_t<detail::input_decl_t<S>, true>;
template <class S>
using output_view_t = detail::view_t<typename S::output, false>;
template <class S>
using grad_input_view_t = detail::view_t<detail::input_decl_t<S>, false>;

/// A stage whose incoming edges carry types of their own: `using inputs = per_edge<A, B, ...>;`
/// (graph/tensors.hpp), one per incoming edge in edge order.
template <class S>
concept has_per_edge_inputs = requires {
  typename S::inputs;
};

namespace detail {
template <class P, bool Const>
struct edge_views_of;
template <class... X, bool Const>
struct edge_views_of<per_edge<X...>, Const> {
  using type = edge_views<Const, X...>;
};
template <class S, bool Const>
struct inputs_view {
  using type = view_list<view_t<input_decl_t<S>, Const>>;
};
template <class S, bool Const>
requires has_per_edge_inputs<S>
struct inputs_view<S, Const> {
  using type = typename edge_views_of<typename S::inputs, Const>::type;
};
}  // namespace detail

/// What a stage's context holds for all its inputs (`inputs`) and the gradients it writes for them
/// (`grad_inputs`): a view_list of its one input type, or, with per-edge inputs, edge_views.
template <class S>
using inputs_view_t = typename detail::inputs_view<S, true>::type;
template <class S>
using grad_inputs_view_t = typename detail::inputs_view<S, false>::type;
template <class S>
using grad_output_view_t = detail::view_t<typename S::output, true>;

/// The spans of a stage's inputs (a single tensor's), one per incoming edge: kept for code that
/// names the type; view_list is the general form.
template <class T>
using span_list = view_list<std::span<T>>;

template <class S>
struct forward_ctx {
  int stage = 0;       // the stage's index in the model's chain (DualPipe: the same in both directions)
  int microbatch = 0;  // 0 .. m-1
  input_view_t<S> input;
  output_view_t<S> output;  // empty on the last stage (unless the executor keeps outputs)
  std::span<stash_t<S>> stash;
  void* stream = nullptr;     // the CUDA executor: the cudaStream_t to launch on (host executor: nullptr)
  inputs_view_t<S> inputs{};  // every input, in edge order (inputs[0], or get<0>() with per-edge inputs, is input)
  target_view_t<S> target{};  // a sink: this microbatch's targets (its `using target`); else empty
  float* loss = nullptr;      // a sink: where its forward writes this microbatch's loss (device memory on a device
                              // executor: write it from a kernel on `stream`); nullptr on the other stages
  bool grad = true;           // a backward of this forward follows; false in a forward-only plan (evaluation,
                              // inference) and for a forward the step recomputes before its backward (its
                              // RECOMPUTE's forward has it true): keep nothing outside the stash
  std::span<const param_t<S>> params{};  // a stage that lends its parameters (lends_parameters), under FSDP on
                                         // a host mesh: its gathered parameters, where pipetype holds them
                                         // for this call; else empty (read your own)
};

/// How a backward says a bucket of its weight gradient is written (backward_ctx::gradients_ready):
/// the step's bucket count, the executor's function and what it passes it.
struct bucket_signal {
  int buckets = 0;
  void (*fn)(void* at, int bucket) = nullptr;
  void* at = nullptr;
};

template <class S>
struct backward_ctx {
  int stage = 0;
  int microbatch = 0;
  input_view_t<S> input;
  grad_output_view_t<S> grad_output;  // empty on the last stage
  grad_input_view_t<S> grad_input;    // empty on stage 0 and in backward_weight
  std::span<stash_t<S>> stash;
  std::span<weight_grad_t<S>> weight_grad;  // this microbatch's weight gradient, to be written
                                            // (stages that declare `weight_grad`; not in backward_input)
  void* stream = nullptr;                   // the CUDA executor: the cudaStream_t to launch on
  inputs_view_t<S> inputs{};                // every input, in edge order (inputs[0] or get<0>() is input)
  grad_inputs_view_t<S> grad_inputs{};      // the gradient for each, in edge order (empty as grad_input is)
  target_view_t<S> target{};                // a sink: this microbatch's targets; else empty
  float loss_scale = 0;  // a sink: d(the step's objective)/d(this microbatch's loss), the seed of its backward
                         // (the batch's loss_scaling: 1/m for the mean, the default); 0 on the other stages
  std::span<const param_t<S>> params{};  // as forward_ctx::params
  // a bucketed mesh step (dp_options::buckets): in the stage's last weight backward of the step,
  // the signal behind gradients_ready; elsewhere none
  const bucket_signal* bucket_ready = nullptr;

  /// The step's buckets (dp_options::buckets) in the stage's last weight backward of a bucketed
  /// mesh step; 0 elsewhere.
  int buckets() const noexcept { return bucket_ready ? bucket_ready->buckets : 0; }
  /// Buckets 0 … b of weight_grad are written (bucket_of(weight_grad.size(), buckets(), k): bucket
  /// 0 is the array's end, the last layers, which a backward reaches first): their reductions may
  /// start while this backward goes on, which must then leave those elements alone. Optional —
  /// what is not said ready is at the end of the backward — and a no-op where buckets() is 0.
  void gradients_ready(int b) const {
    if (b >= 0 && b < buckets()) bucket_ready->fn(bucket_ready->at, b);
  }
  /// Every element of weight_grad from `from` to its end is written (a backward that goes from
  /// the last layer back, having finished the layer that begins at `from`): the buckets wholly in
  /// there are ready. A no-op where buckets() is 0.
  void gradients_written_from(std::size_t from) const {
    int b = -1;
    while (b + 1 < buckets() && bucket_of(weight_grad.size(), buckets(), b + 1).begin >= from) ++b;
    if (b >= 0) gradients_ready(b);
  }
};

/// What a stage's optimizer hook sees in a step's OPT_STEP (dp_options::optimizer, zero; see the
/// top of this file): the part of its parameters this replica updates and their gradients,
/// element for element.
template <class S>
struct optimizer_ctx {
  int stage = 0;                            // as forward_ctx::stage
  std::span<param_t<S>> params;             // elements [offset, offset + size) of the stage's parameters: the
                                            // replica's shard with ZeRO-1 or FSDP (where pipetype holds it when
                                            // the stage lends them), all of them otherwise
  std::span<const weight_grad_t<S>> grads;  // the same elements of weight_gradients(), summed over the replicas
                                            // (and a tie group's stages)
  std::size_t offset = 0;                   // where `params` begins in parameters()
  int replica = 0, replicas = 1;            // this replica, of the mesh's dp
  double grad_norm = -1;                    // with GRAD_NORM in the step: the global gradient norm; else −1
  bool finite = true;                       // with FINITE_CHECK in the step: false when some gradient of the
                                            // step, on any rank, is not finite — skip the update (every
                                            // rank's OPT_STEP sees the same); else true
  const double* squares = nullptr;          // on a device executor, with GRAD_NORM or FINITE_CHECK in the step:
                                            // one double in device memory, the step's Σ x² over every rank's
                                            // reduced gradients (√ is the norm; not finite: skip), written on
                                            // `stream` before this call's work there runs; nullptr elsewhere
                                            // (grad_norm and finite say it on the host)
  void* stream = nullptr;                   // as forward_ctx::stream
};

template <class S>
concept has_full_backward = requires(S& s, const backward_ctx<S>& c) {
  s.backward(c);
};
template <class S>
concept has_split_backward = requires(S& s, const backward_ctx<S>& c) {
  s.backward_input(c);
  s.backward_weight(c);
};

/// A stage that hands its weight gradients to pipetype to accumulate in microbatch order.
template <class S>
concept has_weight_grad = requires {
  typename S::weight_grad;
}
&&requires(S& s) {
  { s.weight_gradients() } -> std::convertible_to<std::span<weight_grad_t<S>>>;
};

/// A stage with a weight_grad that adds one microbatch's weight gradient into its accumulators
/// itself, asynchronously on `stream` (a cudaStream_t on a device; nullptr on host threads):
///   void add_weight_grad(std::span<const T> g, void* stream);
/// A device executor needs it (the gradients live in device memory, where pipetype cannot add
/// them without a kernel); host executors call it too when it exists.
template <class S>
concept adds_weight_grad_on_stream = has_weight_grad<S> &&
    requires(S& s, std::span<const weight_grad_t<S>> g, void* stream) {
  s.add_weight_grad(g, stream);
};

/// A stage that squares its weight gradients on a stream (a device's GRAD_NORM and FINITE_CHECK):
///   void sum_squares(std::span<const T> part, double* sum, bool add, void* stream);
/// writes (add false) or adds (add true) Σ x² of `part` — elements of its weight_gradients(), in
/// device memory — in double to the one device double `sum`, asynchronously on `stream`. An empty
/// part with add false writes 0. A device executor needs it for those two actions (pipetype has no
/// kernel of its own); the host executor squares host memory itself.
template <class S>
concept sums_squares_on_stream = has_weight_grad<S> &&
    requires(S& s, std::span<const weight_grad_t<S>> part, double* sum, bool add, void* stream) {
  s.sum_squares(part, sum, add, stream);
};

/// A stage whose output feeds several stages and that adds one consumer's gradient into another's
/// itself, asynchronously on `stream` (a cudaStream_t on a device; nullptr on host threads):
///   void add_grad_output(std::span<T> into, std::span<const T> g, void* stream);
/// pipetype calls it for each gradient after the first, in edge order (see the top of this file).
template <class S>
concept adds_grad_output_on_stream = requires(S& s, detail::view_t<typename S::output, false> into,
                                              grad_output_view_t<S> g, void* stream) {
  s.add_grad_output(into, g, stream);
};

/// A stage whose parameters pipetype may gather and release (FSDP; see the top of this file).
template <class S>
concept has_parameters = requires(S& s) {
  typename std::remove_cvref_t<decltype(s.parameters())>::element_type;
}
&&std::same_as<std::remove_cvref_t<decltype(std::declval<S&>().parameters())>,
               std::span<typename std::remove_cvref_t<decltype(std::declval<S&>().parameters())>::element_type>> &&
    !std::is_const_v<typename std::remove_cvref_t<decltype(std::declval<S&>().parameters())>::element_type>;

/// A stage that lets pipetype hold its parameters under FSDP (see the top of this file): it reads
/// them from ctx.params whenever that is not empty.
template <class S>
concept lends_parameters = has_parameters<S> && requires {
  requires S::lends_parameters;
};

/// A stage whose optimizer a step may run (OPT_STEP; see the top of this file).
template <class S>
concept has_optimizer_step = has_parameters<S> && has_weight_grad<S> && requires(S& s, const optimizer_ctx<S>& c) {
  s.optimizer_step(c);
};

/// A stage that says which part of its weight gradients a tie group's parameter holds.
template <class S>
concept has_tied_gradients = has_weight_grad<S> && requires(S& s, int tie) {
  { s.tied_gradients(tie) } -> std::convertible_to<std::span<weight_grad_t<S>>>;
};

/// A stage that keeps state for its backward outside its stash (see the top of this file).
template <class S>
concept saves_outside_stash = requires {
  requires S::saves_outside_stash;
};

/// A pipeline stage: declared input/output tensors, forward, and a full or split backward.
template <class S>
concept stage =
    detail::is_tensor_set_v<detail::input_decl_t<S>> &&
    (!has_per_edge_inputs<S> || detail::per_edge_traits<typename S::inputs>::valid) &&
    detail::is_tensor_set_v<typename S::output>&& detail::is_tensor_set_v<target_tensor_t<S>>&& detail::is_tensor<
        stash_tensor_t<S>>::value&& detail::is_tensor<weight_grad_tensor_t<S>>::value
    && (!requires { typename S::weight_grad; } || has_weight_grad<S>)&&requires(S& s, const forward_ctx<S>& f) {
  s.forward(f);
}
&&(has_full_backward<S> || has_split_backward<S>);

namespace detail {

/// True for a stage; for anything else a static_assert whose message names the member that is
/// missing or wrong (chain and uniform_chain call it, so a model of a non-stage says why).
template <class S>
constexpr bool diagnose_stage() {
  constexpr bool has_bi = requires(S & s, const backward_ctx<S>& c) { s.backward_input(c); };
  constexpr bool has_bw = requires(S & s, const backward_ctx<S>& c) { s.backward_weight(c); };
  if constexpr (per_edge_invalid<S>()) {
    static_assert(always_false_stage_v<S>,
                  "pipetype::stage: the stage's `inputs` is not a pipetype::per_edge<...> of 1 to 8 tensor<...> or "
                  "tensors<...>, one per incoming edge");
    return false;
  } else if constexpr (!requires { typename input_decl<S>::type; }) {
    static_assert(always_false_stage_v<S>,
                  "pipetype::stage: the stage has no `using input = pipetype::tensor<T, N...>;` (what it takes per "
                  "microbatch)");
    return false;
  } else if constexpr (!is_tensor_set_v<input_decl_t<S>>) {
    static_assert(
        always_false_stage_v<S>,
        "pipetype::stage: the stage's `input` is not a pipetype::tensor<T, N...> nor a pipetype::tensors<...> "
        "of 1 to 8 tensor<...>, no_grad<...> or varying<...>");
    return false;
  } else if constexpr (!requires { typename S::output; }) {
    static_assert(always_false_stage_v<S>,
                  "pipetype::stage: the stage has no `using output = pipetype::tensor<T, N...>;` (what it gives per "
                  "microbatch)");
    return false;
  } else if constexpr (!is_tensor_set_v<typename S::output>) {
    static_assert(
        always_false_stage_v<S>,
        "pipetype::stage: the stage's `output` is not a pipetype::tensor<T, N...> nor a pipetype::tensors<...> "
        "of 1 to 8 tensor<...>, no_grad<...> or varying<...>");
    return false;
  } else if constexpr (!is_tensor_set_v<target_tensor_t<S>>) {
    static_assert(
        always_false_stage_v<S>,
        "pipetype::stage: the stage's `target` is not a pipetype::tensor<T, N...> nor a pipetype::tensors<...> "
        "of 1 to 8 tensor<...>, no_grad<...> or varying<...>");
    return false;
  } else if constexpr (!is_tensor<stash_tensor_t<S>>::value) {
    static_assert(always_false_stage_v<S>, "pipetype::stage: the stage's `stash` is not a pipetype::tensor<T, N...>");
    return false;
  } else if constexpr (!is_tensor<weight_grad_tensor_t<S>>::value) {
    static_assert(always_false_stage_v<S>,
                  "pipetype::stage: the stage's `weight_grad` is not a pipetype::tensor<T, N...>");
    return false;
  } else if constexpr (!requires(S & s, const forward_ctx<S>& f) { s.forward(f); }) {
    static_assert(always_false_stage_v<S>,
                  "pipetype::stage: the stage has no `void forward(const pipetype::forward_ctx<S>&)`");
    return false;
  } else if constexpr (has_bi && !has_bw) {
    static_assert(always_false_stage_v<S>,
                  "pipetype::stage: the stage has backward_input but no `void backward_weight(const "
                  "pipetype::backward_ctx<S>&)`: a split backward needs both (is it misspelled?)");
    return false;
  } else if constexpr (has_bw && !has_bi) {
    static_assert(always_false_stage_v<S>,
                  "pipetype::stage: the stage has backward_weight but no `void backward_input(const "
                  "pipetype::backward_ctx<S>&)`: a split backward needs both (is it misspelled?)");
    return false;
  } else if constexpr (!has_full_backward<S> && !has_split_backward<S>) {
    static_assert(always_false_stage_v<S>,
                  "pipetype::stage: the stage has no `void backward(const pipetype::backward_ctx<S>&)` (nor "
                  "backward_input and backward_weight)");
    return false;
  } else if constexpr (requires { typename S::weight_grad; } && !has_weight_grad<S>) {
    static_assert(always_false_stage_v<S>,
                  "pipetype::stage: the stage declares `weight_grad` but no `std::span<T> weight_gradients()` (the "
                  "accumulators pipetype adds each microbatch's weight gradient into)");
    return false;
  } else if constexpr (!requires { typename S::weight_grad; } &&
                       (
                           requires(S & s) { s.weight_gradients(); } || requires(S & s) { &S::add_weight_grad; })) {
    static_assert(always_false_stage_v<S>,
                  "pipetype::stage: the stage has weight_gradients() or add_weight_grad() but no `using weight_grad = "
                  "pipetype::tensor<T, N>;`, so pipetype would never hand it a gradient (is it misspelled?)");
    return false;
  } else {
    return true;
  }
}

}  // namespace detail

namespace detail {

/// Tensor `Tensor` of an edge From -> To (a chain's link, or a dag's edge `Edge`): what the
/// producer gives (member `Out` of its output) against what the consumer takes (member `In` of
/// its input). The instantiation names the edge and the tensor.
template <bool Dag, int Edge, int From, int To, int Tensor, class Out, class In>
struct edge_tensor {
  using P = typename Out::tensor_type;
  using C = typename In::tensor_type;
  static_assert(Dag || std::is_same_v<typename P::value_type, typename C::value_type>,
                "pipetype::chain: a stage's output element type differs from the next stage's input element type "
                "(tensor Tensor of the link From -> To in edge_tensor<..., From, To, Tensor, ...>)");
  static_assert(!Dag || std::is_same_v<typename P::value_type, typename C::value_type>,
                "pipetype::dag: an edge's producer gives another element type than its consumer takes (tensor Tensor "
                "of edge Edge, From -> To, in edge_tensor<true, Edge, From, To, Tensor, ...>)");
  static constexpr bool extent_ok = P::is_dynamic || C::is_dynamic || P::extent == C::extent;
  static_assert(Dag || extent_ok,
                "pipetype::chain: a stage's output extent differs from the next stage's input extent (tensor Tensor "
                "of the link From -> To in edge_tensor<..., From, To, Tensor, ...>)");
  static_assert(!Dag || extent_ok,
                "pipetype::dag: an edge's producer gives another extent than its consumer takes (tensor Tensor of "
                "edge Edge, From -> To, in edge_tensor<true, Edge, From, To, Tensor, ...>)");
  static_assert(Out::grad == In::grad,
                "pipetype: a tensor of an edge is no_grad on one side only: the producer expects its gradient back "
                "exactly when the consumer sends one (tensor Tensor of the edge From -> To in edge_tensor<..., From, "
                "To, Tensor, ...>; mark it no_grad on both sides or on neither)");
  static_assert(
      Out::varies == In::varies,
      "pipetype: a tensor of an edge is varying on one side only: both sides must agree that its extent "
      "varies per microbatch (tensor Tensor of the edge From -> To in edge_tensor<..., From, To, Tensor, ...>)");
  static constexpr bool value = true;
};

/// The input type of stage S over its incoming edge number `Pos` (edge order): its per-edge
/// input, or its one input.
template <class S, int Pos, bool PerEdge = (per_edge_count<S>() > 0)>
struct input_for_edge {
  using type = input_decl_t<S>;
};
template <class S, int Pos>
struct input_for_edge<S, Pos, true> {
  using type = std::tuple_element_t<(Pos < per_edge_traits<typename S::inputs>::count ? Pos : 0),
                                    typename per_edge_traits<typename S::inputs>::types>;
};

/// The producer's output against the consumer's input (for that edge), tensor by tensor.
template <bool Dag, int Edge, int From, int To, class Producer, class Consumer, int Pos = 0>
constexpr bool edge_fits() {
  using O = typename Producer::output;
  using I = typename input_for_edge<Consumer, Pos>::type;
  constexpr bool same_count = set_traits<O>::count == set_traits<I>::count;
  static_assert(same_count,
                "pipetype: an edge's producer gives another number of tensors than its consumer takes "
                "(the edge From -> To in edge_fits<..., From, To, ...>)");
  if constexpr (same_count) return []<std::size_t... K>(std::index_sequence<K...>) {
      return (edge_tensor<Dag, Edge, From, To, static_cast<int>(K), member_t<O, K>, member_t<I, K>>::value && ...);
    }
  (std::make_index_sequence<static_cast<std::size_t>(set_traits<O>::count)>{});
  else return false;
}

}  // namespace detail

namespace detail {
/// Elements per microbatch of tensor k of a declared input/output `X` of stage `s`: the tensor's
/// extent, or the stage's member `extent_of(s, k)` when the tensor is dynamic.
template <class X, class S, class Member>
constexpr std::size_t set_extent(const S& s, std::size_t k, Member member) {
  std::size_t n = 0;
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    ((K == k ? (n = tensor_t<X, K>::is_dynamic ? member(s, k) : tensor_t<X, K>::extent, 0) : 0), ...);
  }
  (std::make_index_sequence<static_cast<std::size_t>(set_traits<X>::count)>{});
  return n;
}
template <class X>
constexpr bool any_dynamic() {
  return []<std::size_t... K>(std::index_sequence<K...>) { return (tensor_t<X, K>::is_dynamic || ...); }
  (std::make_index_sequence<static_cast<std::size_t>(set_traits<X>::count)>{});
}
}  // namespace detail

namespace detail {
/// Tensor k's elements per microbatch of a declared input, output or target `X` of stage `s`: its
/// extent, or, when it is dynamic, the stage's member: `indexed(s, k)` (a set's form, k the
/// tensor) when that is callable, else `whole(s)` (a single tensor's). `known` says whether a
/// dynamic tensor has a member to ask.
template <class X, class S, class Indexed, class Whole>
struct declared {
  static constexpr bool by_index = std::is_invocable_v<Indexed, const S&, std::size_t>;
  static constexpr bool by_whole = set_traits<X>::single && std::is_invocable_v<Whole, const S&>;
  static constexpr bool known = !any_dynamic<X>() || by_index || by_whole;
  static constexpr std::size_t extent(const S& s, std::size_t k, Indexed indexed, Whole whole) {
    if constexpr (by_index)
      return set_extent<X>(s, k, indexed);
    else if constexpr (by_whole)
      return set_extent<X>(s, k, [&](const S& stage_obj, std::size_t) { return whole(stage_obj); });
    else
      return set_extent<X>(s, k, [](const S&, std::size_t) { return std::size_t{0}; });
  }
};
template <class X, class S, class Indexed, class Whole>
constexpr std::size_t declared_extent(const S& s, std::size_t k, Indexed indexed, Whole whole) {
  return declared<X, S, Indexed, Whole>::extent(s, k, indexed, whole);
}
inline constexpr auto input_by_index =
    [](const auto& stage_obj, std::size_t tensor_index) -> decltype(std::size_t(stage_obj.input_extent(tensor_index))) {
  return std::size_t(stage_obj.input_extent(tensor_index));
};
inline constexpr auto input_whole = [](const auto& stage_obj) -> decltype(std::size_t(stage_obj.input_extent())) {
  return std::size_t(stage_obj.input_extent());
};
inline constexpr auto output_by_index =
    [](const auto& stage_obj,
       std::size_t tensor_index) -> decltype(std::size_t(stage_obj.output_extent(tensor_index))) {
  return std::size_t(stage_obj.output_extent(tensor_index));
};
inline constexpr auto output_whole = [](const auto& stage_obj) -> decltype(std::size_t(stage_obj.output_extent())) {
  return std::size_t(stage_obj.output_extent());
};
inline constexpr auto target_by_index =
    [](const auto& stage_obj,
       std::size_t tensor_index) -> decltype(std::size_t(stage_obj.target_extent(tensor_index))) {
  return std::size_t(stage_obj.target_extent(tensor_index));
};
inline constexpr auto target_whole = [](const auto& stage_obj) -> decltype(std::size_t(stage_obj.target_extent())) {
  return std::size_t(stage_obj.target_extent());
};
}  // namespace detail

/// Elements per microbatch of tensor k of a stage's input (k = 0: a single tensor's): the tensor's
/// extent, or the stage's member input_extent() (a set: input_extent(k)) when it is dynamic.
template <stage S>
constexpr std::size_t input_extent(const S& s, std::size_t k = 0) {
  if constexpr (has_per_edge_inputs<S> && requires { s.input_extent(std::size_t{0}, k); })  // edge 0's
    return detail::set_extent<detail::input_decl_t<S>>(s, k, [](const S& stage_obj, std::size_t tensor_index) {
      return std::size_t(stage_obj.input_extent(std::size_t{0}, tensor_index));
    });
  using D =
      detail::declared<detail::input_decl_t<S>, S, decltype(detail::input_by_index), decltype(detail::input_whole)>;
  static_assert(D::known,
                "pipetype::stage: a dynamic input needs a member input_extent() (a set: input_extent(std::size_t k))");
  return D::extent(s, k, detail::input_by_index, detail::input_whole);
}
/// The same for the stage's output (output_extent() / output_extent(k)).
template <stage S>
constexpr std::size_t output_extent(const S& s, std::size_t k = 0) {
  using D = detail::declared<typename S::output, S, decltype(detail::output_by_index), decltype(detail::output_whole)>;
  static_assert(
      D::known,
      "pipetype::stage: a dynamic output needs a member output_extent() (a set: output_extent(std::size_t k))");
  return D::extent(s, k, detail::output_by_index, detail::output_whole);
}
/// The same for a sink's target (target_extent() / target_extent(k)); none: no tensor.
template <stage S>
constexpr std::size_t target_extent(const S& s, std::size_t k = 0) {
  using X = target_tensor_t<S>;
  using D = detail::declared<X, S, decltype(detail::target_by_index), decltype(detail::target_whole)>;
  static_assert(
      D::known,
      "pipetype::stage: a dynamic target needs a member target_extent() (a set: target_extent(std::size_t k))");
  return D::extent(s, k, detail::target_by_index, detail::target_whole);
}
/// The bytes of a stage's input, output and target per microbatch (graph/tensors.hpp's edge_shape;
/// a stage without a target: no tensors).
template <stage S>
constexpr edge_shape input_shape(const S& s) {
  return detail::shape_of<detail::input_decl_t<S>>(
      [&](std::size_t tensor_index) { return input_extent(s, tensor_index); });
}
template <stage S>
constexpr edge_shape output_shape(const S& s) {
  return detail::shape_of<typename S::output>([&](std::size_t tensor_index) { return output_extent(s, tensor_index); });
}
template <stage S>
constexpr edge_shape target_shape(const S& s) {
  if constexpr (!has_target<S>)
    return edge_shape{};
  else
    return detail::shape_of<target_tensor_t<S>>(
        [&](std::size_t tensor_index) { return target_extent(s, tensor_index); });
}
template <stage S>
constexpr std::size_t stash_extent(const S& s) {
  if constexpr (!stash_tensor_t<S>::is_dynamic)
    return stash_tensor_t<S>::extent;
  else if constexpr (requires { s.stash_extent(); })
    return s.stash_extent();
  else
    static_assert(sizeof(S) == 0, "pipetype::stage: a dynamic stash needs a member stash_extent()");
}
template <stage S>
constexpr std::size_t weight_grad_extent(const S& s) {
  if constexpr (!weight_grad_tensor_t<S>::is_dynamic)
    return weight_grad_tensor_t<S>::extent;
  else if constexpr (requires { s.weight_grad_extent(); })
    return s.weight_grad_extent();
  else
    static_assert(sizeof(S) == 0, "pipetype::stage: a dynamic weight_grad needs a member weight_grad_extent()");
}

}  // namespace pipetype
