// pipetype/torch/stage.hpp — a LibTorch module as a pipeline stage (docs/14_libtorch.md).
//
// `pipetype::torch::module_stage<In, Out, Target>` is a stage (graph/stage.hpp) whose forward is
// a `torch::nn::Module` (or any function over tensors) and whose backward is LibTorch's autograd:
//
//   using hidden = pt::tensor<float, pt::dynamic>;
//   pt::torch::module_stage<hidden, hidden> s{block /* a torch::nn::Linear, a user module, ... */,
//                                             {.name = "block 1", .inputs = {{{rows, width}}}, .outputs = {{{rows, width}}}}};
//
// What it does with each of pipetype's calls:
//   forward          views the input slots as tensors (from_blob: no copy; a varying<> tensor's
//                    varying dimension follows the microbatch's length), runs the forward with a
//                    graph, copies the outputs into the output slots (or, on a sink, computes the
//                    loss from the outputs and the targets and writes it), and keeps the graph for
//                    this microbatch (one holder per microbatch, behind a mutex: DualPipe may run
//                    one stage object from two lanes at once). With ctx.grad false (a forward-only
//                    plan, or a forward the step recomputes) it runs without a graph, as under
//                    NoGradGuard, and keeps nothing
//   backward         one autograd pass from the outputs (or the loss, seeded with ctx.loss_scale)
//                    to the inputs and the parameters; the input gradients go to the grad_input
//                    slots, the parameters' to ctx.weight_grad (pipetype adds them up in
//                    microbatch order, so every schedule gives bitwise the same gradients)
//   backward_input   the split of the zero-bubble schedules, as PyTorch's stage_backward_input:
//   backward_weight  I computes the input gradients and keeps, for every node of the graph where
//                    a parameter's gradient path leaves the input's (a matmul's backward, say), the
//                    gradient flowing into that node; W starts from those nodes and computes only
//                    the parameters' gradients. I + W therefore costs what one backward does. (When
//                    two such nodes feed one parameter node, W cannot start from both without
//                    counting a path twice: it then runs from the outputs again, which is right but
//                    costs more; `split_exact()` says which happened last.)
//
// Parameters and gradients. At construction the module's parameters move into one flat tensor the
// stage owns (each parameter becomes a view into it, with its values) and their gradients into
// another (each parameter's .grad() lies in it too), so pipetype sees them as one array:
// `parameters()` (FSDP gathers and releases it) and `weight_gradients()` (REDUCE_GRAD sums it over
// replicas). An optimizer over `module->parameters()` (torch::optim) steps the flat arrays through
// the views. Gradients accumulate over a step's microbatches: call `zero_grad()` between steps
// (it also re-attaches a .grad() an optimizer set to undefined).
//
// Sinks. A stage that is a sink in the plan (ctx.loss non-null) needs `loss`: a function of its
// outputs and its targets (`Target`: the batch's targets, bind/batch.hpp) returning one number;
// its value is the microbatch's loss and its backward is seeded with ctx.loss_scale.
//
// Bad input is refused with one sentence naming the stage and the tensor (std::invalid_argument,
// pipetype::shape_error for sizes): an output of the wrong dtype or size, an output that carries a
// gradient back but does not depend on anything with one, a loss that is not one number, a
// parameter that is not the weight gradient's type or that changed after binding, a forward that
// ran a backward itself, an input that moved between its graph's forward and its backward.
// Nothing is half-bound: the constructor checks everything before it moves a parameter.
//
// Memory actions (docs/13, docs/14 §14.5). LibTorch has no C++ route to the tensors autograd saves
// (its saved-tensor hooks take Python objects), so no copy can move a graph: the stage declares
// saves_outside_stash, and a step may offload a microbatch of it only if it recomputes it. Such a
// microbatch's forward runs without a graph (ctx.grad false) and keeps only its input, pipetype's
// own slot, which OFFLOAD and RELOAD move; its RECOMPUTE runs the forward again with a graph,
// from wherever the input is then, and that graph lives to the microbatch's last backward.
//
// Devices. A module whose parameters are on a CUDA device runs under a device executor
// (pipetype::cuda): its slots are viewed as CUDA tensors, every call runs with ctx.stream as
// LibTorch's current stream (torch/cuda/stream.hpp makes it one; include that header once and link
// pipetype::torch_cuda), outputs, gradients and the loss are stored by asynchronous copies on that
// stream, and add_weight_grad adds on it: nothing synchronises the device. A host executor refuses
// such a module, and a device executor a CPU one, in a sentence.
//
// Threads. The host executor runs one thread per rank; LibTorch's own intra-op pool would run more
// on each: set `at::set_num_threads` to what the machine's cores allow per rank (docs/14).
#pragma once

#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <ATen/ATen.h>
#include <malloc.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pipetype/bind/stage_entry.hpp"
#include "pipetype/graph/stage.hpp"
#include "pipetype/graph/tensors.hpp"

namespace pipetype::torch {

/// One tensor of an edge as the module sees it: its shape at the most (a varying<> tensor: with
/// the longest length) and, for a varying tensor, which dimension follows the microbatch's length.
struct tensor_spec {
  std::vector<std::int64_t> shape = {};
  int varying_dim = -1;
};

/// What a stage computes: its input tensors (in the edge's order) to its output tensors.
using forward_fn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;
/// A sink's loss from its outputs and its targets: one number.
using loss_fn =
    std::function<at::Tensor(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& targets)>;

/// How a module meets its edges.
struct stage_spec {
  std::string name = {};                // in errors ("stage 'block 1'"); may be empty
  std::vector<tensor_spec> inputs = {};   // one per tensor of the edge, in the set's order
  std::vector<tensor_spec> outputs = {};  // the same for the outputs
  std::vector<tensor_spec> targets = {};  // a sink's targets (its `Target`), if it has any
  loss_fn loss = {};                      // a sink's loss
  /// Tie groups (dp_options::ties): (group, the module's parameter name), for tied_gradients().
  std::vector<std::pair<int, std::string>> ties = {};
};

namespace detail {

using pipetype::detail::member_t;
using pipetype::detail::set_traits;
using pipetype::detail::tensor_t;

template <class T>
constexpr c10::ScalarType scalar_type_of() {
  return c10::CppTypeToScalarType<T>::value;
}

/// Tensor K of a context's view of X: the span itself for a single tensor, else the set's K-th.
template <class X, std::size_t K, class View>
auto member_span(const View& v) {
  if constexpr (set_traits<X>::single)
    return v;
  else
    return v.template get<K>();
}

/// Calls f(integral_constant<K>) for each tensor K of X.
template <class X, class F>
void for_each_member(F&& f) {
  [&]<std::size_t... K>(std::index_sequence<K...>) { (f(std::integral_constant<std::size_t, K>{}), ...); }
  (std::make_index_sequence<static_cast<std::size_t>(set_traits<X>::count)>{});
}

inline std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

inline std::string shape_text(at::IntArrayRef s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

/// How a device executor's stream (ctx.stream, a cudaStream_t) becomes a LibTorch stream:
/// <pipetype/torch/cuda/stream.hpp> sets it (the one header that includes CUDA's and LibTorch's
/// both; a CUDA build includes it and links pipetype::torch_cuda). nullptr: a build without it.
using external_stream_fn = c10::Stream (*)(void* stream, c10::DeviceIndex device);
inline external_stream_fn& external_stream() {
  static external_stream_fn f = nullptr;
  return f;
}
/// Called as a stage's call on a device begins (true) and ends (false): <pipetype/torch/cuda/stream.hpp>
/// makes LibTorch raise on an operation that synchronises the device while any such call runs.
using device_call_fn = void (*)(bool begins);
inline device_call_fn& device_call() {
  static device_call_fn f = nullptr;
  return f;
}

/// How errors name a stage: "pipetype::torch: stage 'block 1'" (`name` empty: no quotes).
inline std::string stage_who(const std::string& name) {
  return "pipetype::torch: stage" + (name.empty() ? std::string() : " '" + name + "'");
}

/// For one call: ctx.stream as LibTorch's current stream on the stage's device, so that every
/// kernel the module launches, autograd's included, is ordered on the executor's stream (nothing
/// synchronises the device). Nothing on host threads (stream nullptr). `name` is the stage's
/// (stage_spec::name), spelled out only in an error.
class stream_scope {
 public:
  stream_scope(void* stream, const c10::Device& device, const std::string& name) {
    if (stream == nullptr) {
      if (!device.is_cpu())
        throw std::invalid_argument(stage_who(name) + "'s parameters are on " + device.str() +
                                    ", but a host executor runs it: run it with a device executor (pipetype::cuda), "
                                    "or keep the module on the CPU");
      return;
    }
    if (!device.is_cuda())
      throw std::invalid_argument(stage_who(name) + "'s parameters are on " + device.str() +
                                  ", but a device executor runs it: move the module to the GPU before wrapping it");
    if (external_stream() == nullptr)
      throw std::logic_error(stage_who(name) + " runs on a device stream, but nothing includes <pipetype/torch/cuda/stream.hpp> "
                                   "(link pipetype::torch_cuda and include it once)");
    guard_.emplace(external_stream()(stream, device.index()));
    if (device_call() != nullptr) device_call()(true), counted_ = true;
  }
  ~stream_scope() {
    if (counted_) device_call()(false);
  }
  stream_scope(const stream_scope&) = delete;
  stream_scope& operator=(const stream_scope&) = delete;

 private:
  std::optional<c10::StreamGuard> guard_;
  bool counted_ = false;
};

/// Declares `target` when the stage has one.
template <class Target>
struct target_decl {
  using target = Target;
};
template <>
struct target_decl<void> {};

/// The flags the graph walk of a split backward computes per node.
enum : std::uint8_t { reaches_input = 1, reaches_param = 2, visited = 4 };

/// Every node reachable from `roots` (in `order`, each after the nodes it leads to: the order is
/// the graph's, so a step's passes run in the same order every time), with whether it reaches
/// one of `inputs` or `params` (the gradient accumulators of the inputs whose gradients are asked
/// for, and of the parameters).
struct graph_walk {
  std::unordered_map<const ::torch::autograd::Node*, std::uint8_t> flags;
  std::vector<::torch::autograd::Node*> order;
  std::uint8_t operator()(const ::torch::autograd::Node* n) const {
    const auto it = flags.find(n);
    return it == flags.end() ? 0 : it->second;
  }
};
inline graph_walk walk_graph(const ::torch::autograd::edge_list& roots,
                             const std::vector<const ::torch::autograd::Node*>& inputs,
                             const std::vector<const ::torch::autograd::Node*>& params) {
  using node = ::torch::autograd::Node;
  graph_walk w;
  auto& flags = w.flags;
  for (const node* n : inputs) flags[n] |= reaches_input;
  for (const node* n : params) flags[n] |= reaches_param;
  struct frame {
    node* n;
    std::size_t next;
  };
  std::vector<frame> stack;
  for (const auto& r : roots) {
    if (!r.function || (flags[r.function.get()] & visited)) continue;
    flags[r.function.get()] |= visited;
    stack.push_back({r.function.get(), 0});
    while (!stack.empty()) {  // post-order: a node's flags once all its next nodes' are known
      frame& f = stack.back();
      const auto& edges = f.n->next_edges();
      if (f.next < edges.size()) {
        node* m = edges[f.next++].function.get();
        if (m == nullptr) continue;
        std::uint8_t& fm = flags[m];
        if (!(fm & visited)) {
          fm |= visited;
          stack.push_back({m, 0});
        }
        continue;
      }
      std::uint8_t acc = 0;
      for (const auto& e : edges)
        if (e.function) acc |= static_cast<std::uint8_t>(flags[e.function.get()] & (reaches_input | reaches_param));
      flags[f.n] |= acc;
      w.order.push_back(f.n);
      stack.pop_back();
    }
  }
  return w;
}

}  // namespace detail

/// A LibTorch module (or function) as a pipetype stage; see the top of this file.
template <class In, class Out, class Target = void>
class module_stage : public detail::target_decl<Target> {
  static_assert(pipetype::detail::set_traits<In>::valid && pipetype::detail::set_traits<Out>::valid,
                "pipetype::torch::module_stage: In and Out are a pipetype::tensor<T, N...> or a tensors<...> set");

 public:
  using input = In;
  using output = Out;
  using weight_grad = tensor<float, dynamic>;
  /// What the backward needs is the autograd graph, which no copy moves (graph/stage.hpp).
  static constexpr bool saves_outside_stash = true;

  /// A module with `forward(at::Tensor) -> at::Tensor` (torch::nn::Linear, a user's
  /// TORCH_MODULE, ...): one tensor in, one out.
  template <class M>
  requires requires(M& m, at::Tensor x) {
    { m->forward(x) } -> std::convertible_to<at::Tensor>;
    { m.ptr() } -> std::convertible_to<std::shared_ptr<::torch::nn::Module>>;
  }
  module_stage(M module, stage_spec spec)
      : module_stage(module.ptr(),
                     [m = module](const std::vector<at::Tensor>& x) mutable -> std::vector<at::Tensor> {
                       return {m->forward(x.at(0))};
                     },
                     std::move(spec)) {}

  /// Any forward over a module's parameters: `module` holds them (its parameters() are the
  /// stage's, flattened), `forward` maps the input tensors to the outputs.
  module_stage(std::shared_ptr<::torch::nn::Module> module, forward_fn forward, stage_spec spec)
      : st_(std::make_unique<state>()) {
    st_->module = std::move(module);
    st_->forward = std::move(forward);
    st_->spec = std::move(spec);
    bind();
  }

  module_stage(module_stage&&) noexcept = default;
  module_stage& operator=(module_stage&&) noexcept = default;

  // ---- what pipetype asks -----------------------------------------------------------------------
  std::size_t input_extent(std::size_t k) const { return extent(st_->spec.inputs, k); }
  std::size_t output_extent(std::size_t k) const { return extent(st_->spec.outputs, k); }
  std::size_t target_extent(std::size_t k) const { return extent(st_->spec.targets, k); }
  std::size_t weight_grad_extent() const { return static_cast<std::size_t>(st_->flat_params.numel()); }
  std::span<float> weight_gradients() { return span_of(st_->flat_grads); }
  std::span<float> parameters() { return span_of(st_->flat_params); }
  /// The part of weight_gradients() that holds tie group `tie`'s parameter (stage_spec::ties).
  std::span<float> tied_gradients(int tie) { return tied_part(st_->flat_grads, tie); }
  /// The same of parameters().
  std::span<float> tied_parameters(int tie) { return tied_part(st_->flat_params, tie); }

  // ---- for the user ---------------------------------------------------------------------------------
  /// The wrapped module (its parameters are views into parameters()).
  ::torch::nn::Module& module() { return *st_->module; }
  /// The flat parameters and gradients as tensors (views of parameters(), weight_gradients()).
  const at::Tensor& flat_parameters() const { return st_->flat_params; }
  const at::Tensor& flat_gradients() const { return st_->flat_grads; }
  /// Zeroes the gradients (a new step) and re-attaches each parameter's .grad() to them (an
  /// optimizer's zero_grad may have set it to undefined).
  void zero_grad() {
    st_->flat_grads.zero_();
    attach_grads();
  }
  /// Adds one microbatch's weight gradient (pipetype's, written by a backward) into
  /// weight_gradients(), in the order pipetype calls it: elementwise, on `stream` on a device
  /// (asynchronously), on the calling thread on the host.
  void add_weight_grad(std::span<const float> g, void* stream) {
    const detail::stream_scope on_stream(stream, st_->device, st_->spec.name);
    const at::NoGradGuard no_grad;
    st_->flat_grads.add_(at::from_blob(const_cast<float*>(g.data()), {static_cast<std::int64_t>(g.size())},
                                       st_->flat_grads.options()));
  }
  /// The device the parameters (and so the stage) are on.
  c10::Device device() const { return st_->device; }
  /// Whether the last backward_weight started from the kept intermediate gradients (true) or had
  /// to run from the outputs again (false; see the top of this file).
  bool split_exact() const { return st_->last_exact; }
  /// The bytes one microbatch's graph holds (what autograd saves, the outputs and, on a sink, the
  /// loss's part), measured by a forward on zeros of the largest inputs (and targets, where the
  /// spec has a loss), the second of two: how much the C library's heap grows while that graph is
  /// alive. An estimate
  /// (allocator rounding included), 0 where the C library cannot tell (glibc's mallinfo2 only) and
  /// on a device (LibTorch's caching allocator holds that memory).
  /// Call it before a step, from one thread: other threads' allocations would count too.
  std::size_t measure_graph_bytes() {
    if (!st_->device.is_cpu()) return 0;  // (the C library's heap holds no device memory)
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    const auto heap = [] {
      const struct mallinfo2 mi = ::mallinfo2();
      return mi.uordblks + mi.hblkhd;
    };
    std::vector<at::Tensor> inputs;
    detail::for_each_member<In>([&](auto kc) {
      constexpr std::size_t K = decltype(kc)::value;
      using T = typename pipetype::detail::tensor_t<In, K>::value_type;
      at::Tensor t = at::zeros(st_->spec.inputs[K].shape, at::TensorOptions().dtype(detail::scalar_type_of<T>()));
      if (pipetype::detail::member_t<In, K>::grad && at::isFloatingType(t.scalar_type())) t.requires_grad_(true);
      inputs.push_back(std::move(t));
    });
    std::vector<at::Tensor> targets;
    if constexpr (!std::is_void_v<Target>)
      detail::for_each_member<Target>([&](auto kc) {
        constexpr std::size_t K = decltype(kc)::value;
        using T = typename pipetype::detail::tensor_t<Target, K>::value_type;
        targets.push_back(
            at::zeros(st_->spec.targets[K].shape, at::TensorOptions().dtype(detail::scalar_type_of<T>())));
      });
    {  // once first, for what a first forward allocates for good (a library's buffers, caches)
      std::vector<at::Tensor> out = call_forward(inputs, true);
      if (st_->spec.loss && targets.size() == st_->spec.targets.size()) (void)st_->spec.loss(out, targets);
    }
    const std::size_t before = heap();
    std::size_t held = 0;
    {
      std::vector<at::Tensor> out = call_forward(inputs, true);
      at::Tensor loss;
      if (st_->spec.loss && targets.size() == st_->spec.targets.size()) loss = st_->spec.loss(out, targets);
      const std::size_t after = heap();
      held = after > before ? after - before : 0;
    }
    return held;
#else
    return 0;
#endif
  }

  /// Microbatches whose graph the stage still holds (0 after a complete step).
  std::size_t graphs_held() const {
    std::lock_guard lock(st_->mu);
    return st_->records.size();
  }
  /// The most graphs it held at once since construction or the last reset: what the plan's stash
  /// model counts (a graph lives from F to the microbatch's last backward, as a stash does; docs/14
  /// §14.5), so with one stage per rank it equals the plan's per-rank stash peak.
  std::size_t graphs_high_water() const {
    std::lock_guard lock(st_->mu);
    return st_->high_water;
  }
  void reset_graphs_high_water() {
    std::lock_guard lock(st_->mu);
    st_->high_water = st_->records.size();
  }

  // ---- the stage's calls ------------------------------------------------------------------------
  void forward(const forward_ctx<module_stage>& c) {
    const detail::stream_scope on_stream(c.stream, st_->device, st_->spec.name);
    check_parameters();
    auto rec = std::make_unique<record>();
    for_inputs(c.input, [&](std::size_t, at::Tensor t, bool grad) {
      rec->input_ptrs.push_back(t.data_ptr());
      if (c.grad && grad && at::isFloatingType(t.scalar_type())) t.requires_grad_(true);
      rec->inputs.push_back(std::move(t));
    });
    const std::uint64_t before = grads_fingerprint();
    std::vector<at::Tensor> out = call_forward(rec->inputs, c.grad);
    if (grads_fingerprint() != before)
      throw std::invalid_argument(who() + "'s forward ran a backward itself (its parameters' gradients changed): " +
                                  "pipetype runs the backward; return the outputs (a sink: give stage_spec::loss)");
    check_outputs(out);
    copy_outputs(out, c.output);
    if (c.loss != nullptr) {
      if (!st_->spec.loss)
        throw std::invalid_argument(who() + " is a sink of the plan (it computes a loss) but its stage_spec has no loss");
      std::vector<at::Tensor> targets;
      if constexpr (!std::is_void_v<Target>)
        for_views<Target>(c.target, st_->spec.targets, "target",
                          [&](std::size_t, at::Tensor t, bool) { targets.push_back(std::move(t)); });
      at::Tensor loss;
      {
        at::AutoGradMode mode(c.grad);
        loss = st_->spec.loss(out, targets);
      }
      if (!loss.defined() || loss.numel() != 1)
        throw std::invalid_argument(who() + "'s loss is not one number (shape " +
                                    (loss.defined() ? detail::shape_text(loss.sizes()) : std::string("undefined")) +
                                    ")");
      if (c.grad && !loss.requires_grad())
        throw std::invalid_argument(who() + "'s loss does not depend on anything with a gradient");
      store(std::span<float>(c.loss, 1), loss.detach().to(at::kFloat));  // (a device: no item(), no sync)
      rec->roots.push_back(loss.reshape({}));
      rec->root_grad_index.push_back(-1);
    } else if (c.grad) {
      keep_roots(out, *rec);
    }
    if (!c.grad) return;  // a forward-only plan: no graph was built, nothing is kept
    std::lock_guard lock(st_->mu);
    // A second forward of one microbatch before its backward (a RECOMPUTE) rebuilds its graph.
    st_->records[c.microbatch] = std::move(rec);
    st_->high_water = std::max(st_->high_water, st_->records.size());
  }

  void backward(const backward_ctx<module_stage>& c) {
    const detail::stream_scope on_stream(c.stream, st_->device, st_->spec.name);
    std::unique_ptr<record> rec = take(c, true);
    ::torch::autograd::variable_list grads = root_grads(c, *rec, false);
    ::torch::autograd::edge_list outs = input_edges(c, *rec);
    const std::size_t n_in = outs.size();
    for (const auto& e : st_->param_edges) outs.push_back(e);
    auto g = run_engine(root_edges(*rec), grads, false, outs);
    write_input_grads(c, *rec, g, n_in);
    write_weight_grads(c.weight_grad, g, n_in);
  }

  void backward_input(const backward_ctx<module_stage>& c) {
    const detail::stream_scope on_stream(c.stream, st_->device, st_->spec.name);
    record& rec = find(c);
    ::torch::autograd::edge_list ins = input_edges(c, rec);
    const ::torch::autograd::edge_list roots = root_edges(rec);
    // The graph's nodes: which reach an input whose gradient is asked for, which a parameter.
    std::vector<const ::torch::autograd::Node*> in_nodes, param_nodes;
    for (const auto& e : ins) in_nodes.push_back(e.function.get());
    for (const auto& e : st_->param_edges) param_nodes.push_back(e.function.get());
    const detail::graph_walk flag = detail::walk_graph(roots, in_nodes, param_nodes);
    const auto params_only = [&](const ::torch::autograd::Node* n) {  // leads to a parameter, to no input
      const std::uint8_t f = flag(n);
      return !(f & detail::reaches_input) && (f & detail::reaches_param);
    };
    // Where a parameter's gradient path leaves the inputs': the frontier nodes (reach an input,
    // and through another edge a parameter only) and their edges into the parameters' side.
    rec.frontier.clear();
    rec.root_transitions.clear();
    rec.exact = true;
    std::unordered_map<const ::torch::autograd::Node*, const ::torch::autograd::Node*> target_owner;
    for (::torch::autograd::Node* n : flag.order) {
      const std::uint8_t f = flag(n);
      if (!(f & detail::reaches_input) || !(f & detail::reaches_param)) continue;
      frontier_node fn;
      for (const auto& e : n->next_edges()) {
        if (!e.function || !params_only(e.function.get())) continue;
        fn.transitions.push_back(e);
        const auto [it, fresh] = target_owner.emplace(e.function.get(), n);
        if (!fresh && it->second != n) rec.exact = false;  // two frontier nodes feed one parameter node
      }
      if (fn.transitions.empty()) continue;
      fn.node = c10::intrusive_ptr<::torch::autograd::Node>::unsafe_reclaim_from_nonowning(n);
      rec.frontier.push_back(std::move(fn));
    }
    // Roots that reach no input but a parameter: their gradients are W's to use as they are.
    for (std::size_t k = 0; k < roots.size(); ++k)
      if (roots[k].function && params_only(roots[k].function.get())) rec.root_transitions.push_back(k);
    // W reads the root gradients when it starts from roots: then copies (pipetype reuses the slot)
    const bool keep_root_grads = !rec.exact || !rec.root_transitions.empty();
    ::torch::autograd::variable_list grads = root_grads(c, rec, keep_root_grads);
    // I: the input gradients, and the gradients flowing into each frontier node, graph kept.
    ::torch::autograd::edge_list outs = ins;
    std::vector<std::size_t> first_capture;
    for (const auto& fn : rec.frontier) {
      first_capture.push_back(outs.size());
      for (std::uint32_t i = 0; i < fn.node->num_inputs(); ++i) outs.emplace_back(fn.node, i);
    }
    ::torch::autograd::variable_list g;
    if (!outs.empty() && rec.exact) g = run_engine(roots, grads, true, outs);
    else if (!ins.empty()) g = run_engine(roots, grads, true, ins);
    write_input_grads(c, rec, g, ins.size());
    if (rec.exact)
      for (std::size_t k = 0; k < rec.frontier.size(); ++k)
        for (std::uint32_t i = 0; i < rec.frontier[k].node->num_inputs(); ++i)
          rec.frontier[k].captured.push_back(g[first_capture[k] + i]);
    if (keep_root_grads) rec.kept_root_grads = std::move(grads);
    rec.split = true;
  }

  void backward_weight(const backward_ctx<module_stage>& c) {
    const detail::stream_scope on_stream(c.stream, st_->device, st_->spec.name);
    std::unique_ptr<record> rec = take(c, false);
    if (!rec->split) throw std::logic_error(who() + ": backward_weight of microbatch " + std::to_string(c.microbatch) +
                                            " without its backward_input");
    st_->last_exact = rec->exact;
    ::torch::autograd::variable_list g;
    if (!rec->exact) {  // from the outputs again (see the top of this file)
      g = run_engine(root_edges(*rec), rec->kept_root_grads, false, st_->param_edges);
    } else {
      // Phase 1: each frontier node's gradients into the parameters' side, from what I kept.
      ::torch::autograd::edge_list roots;
      ::torch::autograd::variable_list grads;
      const ::torch::autograd::edge_list all_roots = root_edges(*rec);
      for (const std::size_t k : rec->root_transitions) {
        roots.push_back(all_roots[k]);
        grads.push_back(rec->kept_root_grads[k]);
      }
      for (auto& fn : rec->frontier) {
        ::torch::autograd::edge_list from;
        ::torch::autograd::variable_list seed;
        for (std::uint32_t i = 0; i < fn.node->num_inputs(); ++i)
          if (fn.captured[i].defined()) {
            from.emplace_back(fn.node, i);
            seed.push_back(fn.captured[i]);
          }
        if (from.empty()) continue;
        ::torch::autograd::variable_list t = run_engine(from, seed, true, fn.transitions);
        for (std::size_t k = 0; k < t.size(); ++k)
          if (t[k].defined()) {
            roots.push_back(fn.transitions[k]);
            grads.push_back(t[k]);
          }
        fn.captured.clear();
      }
      // Phase 2: from every edge into the parameters' side to the parameters.
      if (!roots.empty()) g = run_engine(roots, grads, false, st_->param_edges);
    }
    write_weight_grads(c.weight_grad, g, 0);
  }

 private:
  struct frontier_node {
    c10::intrusive_ptr<::torch::autograd::Node> node;
    ::torch::autograd::edge_list transitions;     // its edges into the parameters' side
    ::torch::autograd::variable_list captured;    // the gradients flowing into it (I's)
  };
  /// One microbatch's graph, from its forward to its backward (or backward_weight).
  struct record {
    std::vector<at::Tensor> inputs;  // the input views (leaves; those with a gradient require it)
    std::vector<const void*> input_ptrs;
    std::vector<at::Tensor> roots;     // the outputs that carry a gradient back, or the loss
    std::vector<int> root_grad_index;  // each root's output tensor (its grad_output), -1: the loss
    std::vector<frontier_node> frontier;
    std::vector<std::size_t> root_transitions;  // roots W starts from directly
    ::torch::autograd::variable_list kept_root_grads;
    bool split = false, exact = true;
  };
  struct state {
    std::shared_ptr<::torch::nn::Module> module;
    forward_fn forward;
    stage_spec spec;
    std::vector<at::Tensor> params;  // the module's, in its parameters() order
    std::vector<std::string> names;
    std::vector<std::int64_t> offsets;
    at::Tensor flat_params, flat_grads;
    c10::Device device = c10::Device(c10::kCPU);  // the parameters' (a CUDA device: a device executor runs it)
    ::torch::autograd::edge_list param_edges;  // each parameter's gradient accumulator
    mutable std::mutex mu;
    std::unordered_map<int, std::unique_ptr<record>> records;
    std::size_t high_water = 0;  // the most records at once
    bool last_exact = true;
  };
  std::unique_ptr<state> st_;

  std::string who() const { return detail::stage_who(st_->spec.name); }

  std::span<float> tied_part(const at::Tensor& flat, int tie) const {
    for (const auto& [group, name] : st_->spec.ties)
      if (group == tie)
        for (std::size_t i = 0; i < st_->names.size(); ++i)
          if (st_->names[i] == name)
            return span_of(flat).subspan(static_cast<std::size_t>(st_->offsets[i]),
                                         static_cast<std::size_t>(st_->params[i].numel()));
    throw std::invalid_argument(who() + " is in no tie group " + std::to_string(tie) +
                                " (stage_spec::ties names the parameter of each group)");
  }

  static std::span<float> span_of(const at::Tensor& t) {
    return {static_cast<float*>(t.data_ptr()), static_cast<std::size_t>(t.numel())};
  }

  static std::size_t extent(const std::vector<tensor_spec>& specs, std::size_t k) {
    if (k >= specs.size()) return 0;
    return static_cast<std::size_t>(detail::numel_of(specs[k].shape));
  }

  /// Checks the spec against In, Out and Target and moves the parameters into the flat arrays.
  void bind() {
    state& s = *st_;
    if (!s.module) throw std::invalid_argument(who() + ": no module");
    if (!s.forward) throw std::invalid_argument(who() + ": no forward function");
    check_specs<In>(s.spec.inputs, "input");
    check_specs<Out>(s.spec.outputs, "output");
    if constexpr (!std::is_void_v<Target>) check_specs<Target>(s.spec.targets, "target");
    else if (!s.spec.targets.empty())
      throw std::invalid_argument(who() + " describes targets but its type has none (module_stage<In, Out, Target>)");
    std::int64_t total = 0;
    for (const auto& item : s.module->named_parameters(true)) {
      const std::string& name = item.key();
      const at::Tensor& p = item.value();
      if (p.scalar_type() != at::kFloat)
        throw std::invalid_argument(who() + "'s parameter '" + name + "' is " + std::string(c10::toString(p.scalar_type())) +
                                    "; the stage's flat parameters and gradients are float");
      if (s.names.empty()) s.device = p.device();
      if (p.device() != s.device)
        throw std::invalid_argument(who() + "'s parameter '" + name + "' is on " + p.device().str() + ", its first on " +
                                    s.device.str() + ": a stage's parameters live on one device");
      if (!s.device.is_cpu() && !s.device.is_cuda())
        throw std::invalid_argument(who() + "'s parameter '" + name + "' is on " + p.device().str() +
                                    "; module stages run on the CPU or a CUDA device");
      s.names.push_back(name);
      s.params.push_back(p);
      s.offsets.push_back(total);
      total += p.numel();
    }
    for (const auto& [group, name] : s.spec.ties)
      if (std::find(s.names.begin(), s.names.end(), name) == s.names.end())
        throw std::invalid_argument(who() + ": tie group " + std::to_string(group) + " names a parameter '" + name +
                                    "' the module does not have");
    // Nothing above moved a parameter; now they move, all of them.
    const at::TensorOptions flat = at::TensorOptions().dtype(at::kFloat).device(s.device);
    s.flat_params = at::empty({total}, flat);
    s.flat_grads = at::zeros({total}, flat);
    for (std::size_t i = 0; i < s.params.size(); ++i) {
      at::Tensor& p = s.params[i];
      at::Tensor view = s.flat_params.narrow(0, s.offsets[i], p.numel()).view(p.sizes());
      {
        at::NoGradGuard no_grad;
        view.copy_(p);
      }
      p.set_data(view);
      s.param_edges.push_back(::torch::autograd::impl::gradient_edge(p));
    }
    attach_grads();
  }

  template <class X>
  void check_specs(const std::vector<tensor_spec>& specs, const char* what) const {
    if (specs.size() != static_cast<std::size_t>(pipetype::detail::set_traits<X>::count))
      throw std::invalid_argument(who() + " describes " + std::to_string(specs.size()) + " " + what +
                                  " tensor(s); its type has " + std::to_string(pipetype::detail::set_traits<X>::count));
    detail::for_each_member<X>([&](auto kc) {
      constexpr std::size_t K = decltype(kc)::value;
      using M = pipetype::detail::member_t<X, K>;
      using T = typename pipetype::detail::tensor_t<X, K>;
      const tensor_spec& sp = specs[K];
      const std::string name = std::string(what) + " " + std::to_string(K);
      for (const std::int64_t d : sp.shape)
        if (d < 0) throw std::invalid_argument(who() + "'s " + name + " has a dimension of " + std::to_string(d));
      if (sp.varying_dim >= static_cast<int>(sp.shape.size()) || sp.varying_dim < -1)
        throw std::invalid_argument(who() + "'s " + name + ": varying_dim " + std::to_string(sp.varying_dim) +
                                    " is not one of its " + std::to_string(sp.shape.size()) + " dimensions");
      if ((sp.varying_dim >= 0) != M::varies)
        throw std::invalid_argument(who() + "'s " + name + (M::varies ? " is varying<...> but names no varying_dim"
                                                                      : " names a varying_dim but is not varying<...>"));
      if (!T::is_dynamic && static_cast<std::size_t>(detail::numel_of(sp.shape)) != T::extent)
        throw shape_error(who() + "'s " + name + " has shape " + detail::shape_text(sp.shape) + " (" +
                          std::to_string(detail::numel_of(sp.shape)) + " elements); its type says " +
                          std::to_string(T::extent));
    });
  }

  void attach_grads() {
    state& s = *st_;
    // Tensors over the flat gradients' memory that are no views in autograd's sense (an
    // optimizer's zero_grad detaches them in place, which a view refuses); each keeps the flat
    // array alive.
    for (std::size_t i = 0; i < s.params.size(); ++i)
      s.params[i].mutable_grad() =
          at::from_blob(static_cast<float*>(s.flat_grads.data_ptr()) + s.offsets[i], s.params[i].sizes(),
                        [keep = s.flat_grads](void*) {}, s.flat_grads.options());
  }

  /// Changes when autograd writes a parameter's .grad() (in place: its version; or a new tensor).
  std::uint64_t grads_fingerprint() const {
    std::uint64_t h = 0;
    for (const at::Tensor& p : st_->params) {
      const at::Tensor& g = p.grad();
      h = h * 1000003u + (g.defined() ? reinterpret_cast<std::uintptr_t>(g.unsafeGetTensorImpl()) + g._version() : 1u);
    }
    return h;
  }

  void check_parameters() const {
    const state& s = *st_;
    const auto* base = static_cast<const float*>(s.flat_params.data_ptr());
    for (std::size_t i = 0; i < s.params.size(); ++i) {
      const at::Tensor& p = s.params[i];
      if (p.data_ptr() != static_cast<const void*>(base + s.offsets[i]) || !p.is_contiguous())
        throw std::invalid_argument(who() + "'s parameter '" + s.names[i] + "' changed after binding (now shape " +
                                    detail::shape_text(p.sizes()) +
                                    "): pipetype owns its storage; change it in place or build a new stage");
    }
  }

  /// A view of one tensor of a context (a span of T) with the spec's shape, its varying dimension
  /// resolved from the span's size.
  template <class T>
  at::Tensor view_of(std::span<T> v, const tensor_spec& sp, const std::string& name) const {
    std::vector<std::int64_t> shape = sp.shape;
    const auto n = static_cast<std::int64_t>(v.size());
    if (detail::numel_of(shape) == 0) {  // a tensor the edge does not carry here (its extent 0)
      if (n != 0)
        throw shape_error(who() + "'s " + name + " holds " + std::to_string(n) + " elements; its shape " +
                          detail::shape_text(shape) + " has none");
    } else if (sp.varying_dim >= 0) {
      const std::int64_t rest = detail::numel_of(shape) / shape[static_cast<std::size_t>(sp.varying_dim)];
      if (n % rest != 0)
        throw shape_error(who() + "'s " + name + " holds " + std::to_string(n) + " elements, no whole length of " +
                          detail::shape_text(sp.shape));
      shape[static_cast<std::size_t>(sp.varying_dim)] = n / rest;
    } else if (n != detail::numel_of(shape)) {
      throw shape_error(who() + "'s " + name + " holds " + std::to_string(n) + " elements; its shape " +
                        detail::shape_text(shape) + " has " + std::to_string(detail::numel_of(shape)));
    }
    using E = std::remove_const_t<T>;
    return at::from_blob(const_cast<E*>(v.data()), shape,
                         at::TensorOptions().dtype(detail::scalar_type_of<E>()).device(st_->device));
  }

  /// f(k, view, carries_gradient) for each tensor of a context's view of X.
  template <class X, class View, class F>
  void for_views(const View& v, const std::vector<tensor_spec>& specs, const char* what, F&& f) const {
    detail::for_each_member<X>([&](auto kc) {
      constexpr std::size_t K = decltype(kc)::value;
      f(K, view_of(detail::member_span<X, K>(v), specs[K], std::string(what) + " " + std::to_string(K)),
        pipetype::detail::member_t<X, K>::grad);
    });
  }
  template <class View, class F>
  void for_inputs(const View& v, F&& f) const {
    for_views<In>(v, st_->spec.inputs, "input", std::forward<F>(f));
  }

  std::vector<at::Tensor> call_forward(const std::vector<at::Tensor>& inputs, bool grad) {
    at::AutoGradMode mode(grad);  // (a forward-only plan: as under NoGradGuard)
    try {
      return st_->forward(inputs);
    } catch (const c10::Error& e) {  // (on a device: a forward that synchronises it, among others)
      throw std::runtime_error(who() + "'s forward failed in LibTorch: " + e.what_without_backtrace());
    }
  }

  void check_outputs(const std::vector<at::Tensor>& out) const {
    if (out.size() != static_cast<std::size_t>(pipetype::detail::set_traits<Out>::count))
      throw std::invalid_argument(who() + "'s forward returned " + std::to_string(out.size()) +
                                  " tensor(s); its output has " +
                                  std::to_string(pipetype::detail::set_traits<Out>::count));
    detail::for_each_member<Out>([&](auto kc) {
      constexpr std::size_t K = decltype(kc)::value;
      using T = typename pipetype::detail::tensor_t<Out, K>::value_type;
      const at::Tensor& o = out[K];
      const std::string name = "output " + std::to_string(K);
      if (!o.defined()) throw std::invalid_argument(who() + "'s forward returned an undefined " + name);
      if (o.scalar_type() != detail::scalar_type_of<T>())
        throw std::invalid_argument(who() + "'s " + name + " is " + std::string(c10::toString(o.scalar_type())) +
                                    "; the edge declares " + c10::toString(detail::scalar_type_of<T>()));
      if (o.device() != st_->device)
        throw std::invalid_argument(who() + "'s " + name + " is on " + o.device().str() + "; the stage runs on " +
                                    st_->device.str());
    });
  }

  /// Copies the outputs into pipetype's slots (empty on a sink unless the executor keeps outputs).
  template <class View>
  void copy_outputs(const std::vector<at::Tensor>& out, const View& slots) const {
    detail::for_each_member<Out>([&](auto kc) {
      constexpr std::size_t K = decltype(kc)::value;
      using T = typename pipetype::detail::tensor_t<Out, K>::value_type;
      const std::span<T> dst = detail::member_span<Out, K>(slots);
      const at::Tensor& o = out[K];
      if (dst.empty()) return;
      if (static_cast<std::size_t>(o.numel()) != dst.size())
        throw shape_error(who() + "'s output " + std::to_string(K) + " has shape " + detail::shape_text(o.sizes()) +
                          " (" + std::to_string(o.numel()) + " elements); its slot holds " + std::to_string(dst.size()));
      store(dst, o.detach());
    });
  }
  /// Keeps the outputs that carry a gradient back as the graph's roots.
  void keep_roots(const std::vector<at::Tensor>& out, record& rec) const {
    detail::for_each_member<Out>([&](auto kc) {
      constexpr std::size_t K = decltype(kc)::value;
      if constexpr (pipetype::detail::member_t<Out, K>::grad) {
        if (!out[K].requires_grad())
          throw std::invalid_argument(who() + "'s output " + std::to_string(K) +
                                      " carries a gradient back but depends on nothing with one (mark it no_grad<...> "
                                      "in the edge's type, or compute it from the parameters or the inputs)");
        rec.roots.push_back(out[K]);
        rec.root_grad_index.push_back(static_cast<int>(K));
      }
    });
  }

  /// Microbatch c's record (the caller holds st_->mu), or the sentence that it has none.
  auto record_of(const backward_ctx<module_stage>& c) const {
    const auto it = st_->records.find(c.microbatch);
    if (it == st_->records.end())
      throw std::logic_error(who() + ": a backward of microbatch " + std::to_string(c.microbatch) +
                             " whose forward it never ran (or ran its backward twice)");
    return it;
  }
  record& find(const backward_ctx<module_stage>& c) {
    std::lock_guard lock(st_->mu);
    const auto it = record_of(c);
    check_inputs_stayed(c, *it->second);
    return *it->second;
  }
  std::unique_ptr<record> take(const backward_ctx<module_stage>& c, bool check) {
    std::lock_guard lock(st_->mu);
    const auto it = record_of(c);
    std::unique_ptr<record> r = std::move(it->second);
    st_->records.erase(it);
    if (check) check_inputs_stayed(c, *r);
    return r;
  }
  void check_inputs_stayed(const backward_ctx<module_stage>& c, const record& rec) const {
    std::size_t k = 0;
    bool moved = false;
    detail::for_each_member<In>([&](auto kc) {
      constexpr std::size_t K = decltype(kc)::value;
      const auto v = detail::member_span<In, K>(c.input);
      if (!v.empty() && static_cast<const void*>(v.data()) != rec.input_ptrs[k]) moved = true;
      ++k;
    });
    if (moved)
      throw std::invalid_argument(who() + ": microbatch " + std::to_string(c.microbatch) +
                                  "'s input moved between the forward that built its graph and its backward: "
                                  "autograd keeps views of it (a step that moves it must recompute the microbatch)");
  }

  ::torch::autograd::edge_list root_edges(const record& rec) const {
    ::torch::autograd::edge_list e;
    for (const auto& r : rec.roots) e.push_back(::torch::autograd::impl::gradient_edge(r));
    return e;
  }

  /// Each root's gradient: ctx.loss_scale for the loss, else a view of (or, with `keep`, a copy
  /// of) the output's grad_output slot.
  ::torch::autograd::variable_list root_grads(const backward_ctx<module_stage>& c, const record& rec, bool keep) const {
    ::torch::autograd::variable_list g;
    std::vector<at::Tensor> views;
    detail::for_each_member<Out>([&](auto kc) {
      constexpr std::size_t K = decltype(kc)::value;
      const auto v = detail::member_span<Out, K>(c.grad_output);
      views.push_back(v.empty() ? at::Tensor()
                                : view_of(v, st_->spec.outputs[K], "gradient of output " + std::to_string(K)));
    });
    for (std::size_t k = 0; k < rec.roots.size(); ++k) {
      const int i = rec.root_grad_index[k];
      if (i < 0) {
        g.push_back(at::full({}, c.loss_scale, rec.roots[k].options()));
        continue;
      }
      at::Tensor v = views[static_cast<std::size_t>(i)];
      if (!v.defined() && rec.roots[k].numel() == 0) {  // an empty microbatch (length 0): nothing flows
        g.push_back(at::zeros_like(rec.roots[k]));
        continue;
      }
      if (!v.defined())
        throw std::logic_error(who() + ": no gradient arrived for output " + std::to_string(i) +
                               " (is the stage a sink without a loss?)");
      v = v.view(rec.roots[k].sizes());
      g.push_back(keep ? v.clone() : v);
    }
    return g;
  }

  /// The gradient edges of the inputs whose gradients the call asks for (a non-empty grad_input).
  ::torch::autograd::edge_list input_edges(const backward_ctx<module_stage>& c, const record& rec) const {
    ::torch::autograd::edge_list e;
    detail::for_each_member<In>([&](auto kc) {
      constexpr std::size_t K = decltype(kc)::value;
      if (!detail::member_span<In, K>(c.grad_input).empty() && rec.inputs[K].requires_grad())
        e.push_back(::torch::autograd::impl::gradient_edge(rec.inputs[K]));
    });
    return e;
  }

  /// The first `count` of `g` (input_edges' order) into the grad_input slots.
  void write_input_grads(const backward_ctx<module_stage>& c, const record& rec,
                         const ::torch::autograd::variable_list& g, std::size_t count) const {
    std::size_t k = 0;
    detail::for_each_member<In>([&](auto kc) {
      constexpr std::size_t K = decltype(kc)::value;
      const auto dst = detail::member_span<In, K>(c.grad_input);
      if (dst.empty() || !rec.inputs[K].requires_grad() || k >= count) return;
      const at::Tensor& gk = g[k++];
      store(dst, gk);
    });
  }

  /// `src` (undefined: zeros) into a slot of pipetype's: a copy on the CPU, an asynchronous one
  /// on the current (the executor's) stream on a device.
  template <class T>
  void store(std::span<T> dst, const at::Tensor& src) const {
    if (st_->device.is_cpu()) {
      if (!src.defined()) {
        std::memset(static_cast<void*>(dst.data()), 0, dst.size_bytes());
        return;
      }
      const at::Tensor c = src.contiguous();
      std::memcpy(static_cast<void*>(dst.data()), c.data_ptr(), dst.size_bytes());
      return;
    }
    at::Tensor to = at::from_blob(static_cast<void*>(dst.data()), {static_cast<std::int64_t>(dst.size())},
                                  at::TensorOptions().dtype(detail::scalar_type_of<T>()).device(st_->device));
    if (!src.defined())
      to.zero_();
    else
      to.copy_(src.reshape({-1}), /*non_blocking=*/true);
  }

  void write_weight_grads(std::span<float> dst, const ::torch::autograd::variable_list& g, std::size_t from) const {
    const state& s = *st_;
    if (dst.size() != static_cast<std::size_t>(s.flat_params.numel()))
      throw std::logic_error(who() + ": ctx.weight_grad holds " + std::to_string(dst.size()) + " elements, not " +
                             std::to_string(s.flat_params.numel()));
    for (std::size_t i = 0; i < s.params.size(); ++i) {
      float* out = dst.data() + s.offsets[i];
      const auto n = static_cast<std::size_t>(s.params[i].numel());
      const at::Tensor gi = from + i < g.size() ? g[from + i] : at::Tensor();
      store(std::span<float>(out, n), gi);
    }
  }

  ::torch::autograd::variable_list run_engine(const ::torch::autograd::edge_list& roots,
                                              const ::torch::autograd::variable_list& grads, bool keep_graph,
                                              const ::torch::autograd::edge_list& outputs) const {
    try {
      return ::torch::autograd::Engine::get_default_engine().execute(roots, grads, keep_graph, false, false, outputs);
    } catch (const c10::Error& e) {
      throw std::runtime_error(who() + "'s backward failed in LibTorch: " + e.what_without_backtrace());
    }
  }
};

}  // namespace pipetype::torch
