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
// This header is the typed part (the views of a context's tensors, the checks of the edge types,
// the calls); what does not depend on the edges' types, the state behind the stage's pointer and
// the split backward's graph passes, is torch/module_core.hpp's.
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
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <malloc.h>

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
#include "pipetype/torch/module_core.hpp"

namespace pipetype::torch {

namespace detail {

using pipetype::detail::member_t;
using pipetype::detail::set_traits;
using pipetype::detail::tensor_t;

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

/// Declares `target` when the stage has one.
template <class Target>
struct target_decl {
  using target = Target;
};
template <>
struct target_decl<void> {};

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
      : module_stage(
            module.ptr(),
            [m = module](const std::vector<at::Tensor>& x) mutable -> std::vector<at::Tensor> {
              return {m->forward(x.at(0))};
            },
            std::move(spec)) {}

  /// Any forward over a module's parameters: `module` holds them (its parameters() are the
  /// stage's, flattened), `forward` maps the input tensors to the outputs.
  module_stage(std::shared_ptr<::torch::nn::Module> module, forward_fn forward, stage_spec spec)
      : st_(std::make_unique<detail::module_core>()) {
    st_->module = std::move(module);
    st_->forward = std::move(forward);
    st_->spec = std::move(spec);
    bind();
  }

  module_stage(module_stage&&) noexcept = default;
  module_stage& operator=(module_stage&&) noexcept = default;

  // ---- what pipetype asks -----------------------------------------------------------------------
  std::size_t input_extent(std::size_t k) const { return detail::module_core::extent(st_->spec.inputs, k); }
  std::size_t output_extent(std::size_t k) const { return detail::module_core::extent(st_->spec.outputs, k); }
  std::size_t target_extent(std::size_t k) const { return detail::module_core::extent(st_->spec.targets, k); }
  std::size_t weight_grad_extent() const { return static_cast<std::size_t>(st_->flat_params.numel()); }
  std::span<float> weight_gradients() { return detail::module_core::span_of(st_->flat_grads); }
  std::span<float> parameters() { return detail::module_core::span_of(st_->flat_params); }
  /// The part of weight_gradients() that holds tie group `tie`'s parameter (stage_spec::ties).
  std::span<float> tied_gradients(int tie) { return st_->tied_part(st_->flat_grads, tie); }
  /// The same of parameters().
  std::span<float> tied_parameters(int tie) { return st_->tied_part(st_->flat_params, tie); }

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
    st_->attach_grads();
  }
  /// Adds one microbatch's weight gradient (pipetype's, written by a backward) into
  /// weight_gradients(), in the order pipetype calls it: elementwise, on `stream` on a device
  /// (asynchronously), on the calling thread on the host.
  void add_weight_grad(std::span<const float> g, void* stream) {
    const detail::stream_scope on_stream(stream, st_->device, st_->spec.name);
    const at::NoGradGuard no_grad;
    st_->flat_grads.add_(
        at::from_blob(const_cast<float*>(g.data()), {static_cast<std::int64_t>(g.size())}, st_->flat_grads.options()));
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
      std::vector<at::Tensor> out = st_->call_forward(inputs, true);
      if (st_->spec.loss && targets.size() == st_->spec.targets.size()) (void)st_->spec.loss(out, targets);
    }
    const std::size_t before = heap();
    std::size_t held = 0;
    {
      std::vector<at::Tensor> out = st_->call_forward(inputs, true);
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
    st_->check_parameters();
    auto rec = std::make_unique<record>();
    for_inputs(c.input, [&](std::size_t, at::Tensor t, bool grad) {
      rec->input_ptrs.push_back(t.data_ptr());
      if (c.grad && grad && at::isFloatingType(t.scalar_type())) t.requires_grad_(true);
      rec->inputs.push_back(std::move(t));
    });
    const std::uint64_t before = st_->grads_fingerprint();
    std::vector<at::Tensor> out = st_->call_forward(rec->inputs, c.grad);
    if (st_->grads_fingerprint() != before)
      throw std::invalid_argument(st_->who() +
                                  "'s forward ran a backward itself (its parameters' gradients changed): " +
                                  "pipetype runs the backward; return the outputs (a sink: give stage_spec::loss)");
    check_outputs(out);
    copy_outputs(out, c.output);
    if (c.loss != nullptr) {
      if (!st_->spec.loss)
        throw std::invalid_argument(st_->who() +
                                    " is a sink of the plan (it computes a loss) but its stage_spec has no loss");
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
        throw std::invalid_argument(st_->who() + "'s loss is not one number (shape " +
                                    (loss.defined() ? detail::shape_text(loss.sizes()) : std::string("undefined")) +
                                    ")");
      if (c.grad && !loss.requires_grad())
        throw std::invalid_argument(st_->who() + "'s loss does not depend on anything with a gradient");
      st_->store(std::span<float>(c.loss, 1), loss.detach().to(at::kFloat));  // (a device: no item(), no sync)
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
    auto g = st_->run_engine(st_->root_edges(*rec), grads, false, outs);
    write_input_grads(c, *rec, g, n_in);
    st_->write_weight_grads(c.weight_grad, g, n_in);
  }

  void backward_input(const backward_ctx<module_stage>& c) {
    const detail::stream_scope on_stream(c.stream, st_->device, st_->spec.name);
    record& rec = find(c);
    const ::torch::autograd::edge_list ins = input_edges(c, rec);
    const bool keep_root_grads = st_->find_frontier(rec, ins);
    const auto g = st_->input_pass(rec, ins, root_grads(c, rec, keep_root_grads), keep_root_grads);
    write_input_grads(c, rec, g, ins.size());
  }

  void backward_weight(const backward_ctx<module_stage>& c) {
    const detail::stream_scope on_stream(c.stream, st_->device, st_->spec.name);
    std::unique_ptr<record> rec = take(c, false);
    st_->write_weight_grads(c.weight_grad, st_->weight_pass(*rec, c.microbatch), 0);
  }

 private:
  using record = detail::module_core::record;
  std::unique_ptr<detail::module_core> st_;

  /// Checks the spec against In, Out and Target and moves the parameters into the flat arrays.
  void bind() {
    detail::module_core& s = *st_;
    if (!s.module) throw std::invalid_argument(st_->who() + ": no module");
    if (!s.forward) throw std::invalid_argument(st_->who() + ": no forward function");
    check_specs<In>(s.spec.inputs, "input");
    check_specs<Out>(s.spec.outputs, "output");
    if constexpr (!std::is_void_v<Target>)
      check_specs<Target>(s.spec.targets, "target");
    else if (!s.spec.targets.empty())
      throw std::invalid_argument(st_->who() +
                                  " describes targets but its type has none (module_stage<In, Out, Target>)");
    s.bind_parameters();
  }

  template <class X>
  void check_specs(const std::vector<tensor_spec>& specs, const char* what) const {
    if (specs.size() != static_cast<std::size_t>(pipetype::detail::set_traits<X>::count))
      throw std::invalid_argument(st_->who() + " describes " + std::to_string(specs.size()) + " " + what +
                                  " tensor(s); its type has " + std::to_string(pipetype::detail::set_traits<X>::count));
    detail::for_each_member<X>([&](auto kc) {
      constexpr std::size_t K = decltype(kc)::value;
      using M = pipetype::detail::member_t<X, K>;
      using T = typename pipetype::detail::tensor_t<X, K>;
      const tensor_spec& sp = specs[K];
      const std::string name = std::string(what) + " " + std::to_string(K);
      for (const std::int64_t d : sp.shape)
        if (d < 0) throw std::invalid_argument(st_->who() + "'s " + name + " has a dimension of " + std::to_string(d));
      if (sp.varying_dim >= static_cast<int>(sp.shape.size()) || sp.varying_dim < -1)
        throw std::invalid_argument(st_->who() + "'s " + name + ": varying_dim " + std::to_string(sp.varying_dim) +
                                    " is not one of its " + std::to_string(sp.shape.size()) + " dimensions");
      if ((sp.varying_dim >= 0) != M::varies)
        throw std::invalid_argument(
            st_->who() + "'s " + name +
            (M::varies ? " is varying<...> but names no varying_dim" : " names a varying_dim but is not varying<...>"));
      if (!T::is_dynamic && static_cast<std::size_t>(detail::numel_of(sp.shape)) != T::extent)
        throw shape_error(st_->who() + "'s " + name + " has shape " + detail::shape_text(sp.shape) + " (" +
                          std::to_string(detail::numel_of(sp.shape)) + " elements); its type says " +
                          std::to_string(T::extent));
    });
  }

  /// A view of one tensor of a context (a span of T) with the spec's shape, its varying dimension
  /// resolved from the span's size.
  template <class T>
  at::Tensor view_of(std::span<T> v, const tensor_spec& sp, const std::string& name) const {
    std::vector<std::int64_t> shape = sp.shape;
    const auto n = static_cast<std::int64_t>(v.size());
    if (detail::numel_of(shape) == 0) {  // a tensor the edge does not carry here (its extent 0)
      if (n != 0)
        throw shape_error(st_->who() + "'s " + name + " holds " + std::to_string(n) + " elements; its shape " +
                          detail::shape_text(shape) + " has none");
    } else if (sp.varying_dim >= 0) {
      const std::int64_t rest = detail::numel_of(shape) / shape[static_cast<std::size_t>(sp.varying_dim)];
      if (n % rest != 0)
        throw shape_error(st_->who() + "'s " + name + " holds " + std::to_string(n) + " elements, no whole length of " +
                          detail::shape_text(sp.shape));
      shape[static_cast<std::size_t>(sp.varying_dim)] = n / rest;
    } else if (n != detail::numel_of(shape)) {
      throw shape_error(st_->who() + "'s " + name + " holds " + std::to_string(n) + " elements; its shape " +
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

  void check_outputs(const std::vector<at::Tensor>& out) const {
    if (out.size() != static_cast<std::size_t>(pipetype::detail::set_traits<Out>::count))
      throw std::invalid_argument(st_->who() + "'s forward returned " + std::to_string(out.size()) +
                                  " tensor(s); its output has " +
                                  std::to_string(pipetype::detail::set_traits<Out>::count));
    detail::for_each_member<Out>([&](auto kc) {
      constexpr std::size_t K = decltype(kc)::value;
      using T = typename pipetype::detail::tensor_t<Out, K>::value_type;
      const at::Tensor& o = out[K];
      const std::string name = "output " + std::to_string(K);
      if (!o.defined()) throw std::invalid_argument(st_->who() + "'s forward returned an undefined " + name);
      if (o.scalar_type() != detail::scalar_type_of<T>())
        throw std::invalid_argument(st_->who() + "'s " + name + " is " + std::string(c10::toString(o.scalar_type())) +
                                    "; the edge declares " + c10::toString(detail::scalar_type_of<T>()));
      if (o.device() != st_->device)
        throw std::invalid_argument(st_->who() + "'s " + name + " is on " + o.device().str() + "; the stage runs on " +
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
        throw shape_error(st_->who() + "'s output " + std::to_string(K) + " has shape " +
                          detail::shape_text(o.sizes()) + " (" + std::to_string(o.numel()) +
                          " elements); its slot holds " + std::to_string(dst.size()));
      st_->store(dst, o.detach());
    });
  }
  /// Keeps the outputs that carry a gradient back as the graph's roots.
  void keep_roots(const std::vector<at::Tensor>& out, record& rec) const {
    detail::for_each_member<Out>([&](auto kc) {
      constexpr std::size_t K = decltype(kc)::value;
      if constexpr (pipetype::detail::member_t<Out, K>::grad) {
        if (!out[K].requires_grad())
          throw std::invalid_argument(st_->who() + "'s output " + std::to_string(K) +
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
      throw std::logic_error(st_->who() + ": a backward of microbatch " + std::to_string(c.microbatch) +
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
      throw std::invalid_argument(st_->who() + ": microbatch " + std::to_string(c.microbatch) +
                                  "'s input moved between the forward that built its graph and its backward: "
                                  "autograd keeps views of it (a step that moves it must recompute the microbatch)");
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
        throw std::logic_error(st_->who() + ": no gradient arrived for output " + std::to_string(i) +
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
      st_->store(dst, gk);
    });
  }
};

}  // namespace pipetype::torch
