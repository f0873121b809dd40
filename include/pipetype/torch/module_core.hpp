// pipetype/torch/module_core.hpp — what a LibTorch module stage holds and does that does not
// depend on its edges' types (torch/stage.hpp's module_stage<In, Out, Target> is the typed rest).
//
//   stage_spec, tensor_spec   how a module meets its edges (public)
//   stream_scope              ctx.stream as LibTorch's current stream for one call
//   walk_graph                the graph walk that finds where a split backward's W starts
//   module_core               the module, its parameters and gradients moved into two flat
//                             tensors, the graphs kept per microbatch (record), the split
//                             backward's two halves on them (find_frontier, input_pass,
//                             weight_pass), and the copies into pipetype's slots (store)
#pragma once

#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include <ATen/ATen.h>
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
#include <unordered_map>
#include <utility>
#include <vector>

#include "pipetype/graph/stage.hpp"

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
  std::string name = {};                  // in errors ("stage 'block 1'"); may be empty
  std::vector<tensor_spec> inputs = {};   // one per tensor of the edge, in the set's order
  std::vector<tensor_spec> outputs = {};  // the same for the outputs
  std::vector<tensor_spec> targets = {};  // a sink's targets (its `Target`), if it has any
  loss_fn loss = {};                      // a sink's loss
  /// Tie groups (dp_options::ties): (group, the module's parameter name), for tied_gradients().
  std::vector<std::pair<int, std::string>> ties = {};
};

namespace detail {

template <class T>
constexpr c10::ScalarType scalar_type_of() {
  return c10::CppTypeToScalarType<T>::value;
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
      throw std::logic_error(stage_who(name) +
                             " runs on a device stream, but nothing includes <pipetype/torch/cuda/stream.hpp> "
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

/// A module stage's state, whatever its edges' types: held behind a pointer by module_stage, so
/// that the stage moves while the parameters' views into the flat arrays stay put.
class module_core {
 public:
  struct frontier_node {
    c10::intrusive_ptr<::torch::autograd::Node> node;
    ::torch::autograd::edge_list transitions;   // its edges into the parameters' side
    ::torch::autograd::variable_list captured;  // the gradients flowing into it (I's)
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
  std::shared_ptr<::torch::nn::Module> module;
  forward_fn forward;
  stage_spec spec;
  std::vector<at::Tensor> params;  // the module's, in its parameters() order
  std::vector<std::string> names;
  std::vector<std::int64_t> offsets;
  at::Tensor flat_params, flat_grads;
  c10::Device device = c10::Device(c10::kCPU);  // the parameters' (a CUDA device: a device executor runs it)
  ::torch::autograd::edge_list param_edges;     // each parameter's gradient accumulator
  mutable std::mutex mu;
  std::unordered_map<int, std::unique_ptr<record>> records;
  std::size_t high_water = 0;  // the most records at once
  bool last_exact = true;

  std::string who() const { return detail::stage_who(spec.name); }

  std::span<float> tied_part(const at::Tensor& flat, int tie) const {
    for (const auto& [group, name] : spec.ties)
      if (group == tie)
        for (std::size_t i = 0; i < names.size(); ++i)
          if (names[i] == name)
            return span_of(flat).subspan(static_cast<std::size_t>(offsets[i]),
                                         static_cast<std::size_t>(params[i].numel()));
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

  /// Moves the module's parameters into the flat arrays (each becomes a view into them) and
  /// attaches their gradients. Checks every parameter before it moves one.
  void bind_parameters() {
    std::int64_t total = 0;
    for (const auto& item : module->named_parameters(true)) {
      const std::string& name = item.key();
      const at::Tensor& p = item.value();
      if (p.scalar_type() != at::kFloat)
        throw std::invalid_argument(who() + "'s parameter '" + name + "' is " +
                                    std::string(c10::toString(p.scalar_type())) +
                                    "; the stage's flat parameters and gradients are float");
      if (names.empty()) device = p.device();
      if (p.device() != device)
        throw std::invalid_argument(who() + "'s parameter '" + name + "' is on " + p.device().str() +
                                    ", its first on " + device.str() + ": a stage's parameters live on one device");
      if (!device.is_cpu() && !device.is_cuda())
        throw std::invalid_argument(who() + "'s parameter '" + name + "' is on " + p.device().str() +
                                    "; module stages run on the CPU or a CUDA device");
      names.push_back(name);
      params.push_back(p);
      offsets.push_back(total);
      total += p.numel();
    }
    for (const auto& [group, name] : spec.ties)
      if (std::find(names.begin(), names.end(), name) == names.end())
        throw std::invalid_argument(who() + ": tie group " + std::to_string(group) + " names a parameter '" + name +
                                    "' the module does not have");
    // Nothing above moved a parameter; now they move, all of them.
    const at::TensorOptions flat = at::TensorOptions().dtype(at::kFloat).device(device);
    flat_params = at::empty({total}, flat);
    flat_grads = at::zeros({total}, flat);
    for (std::size_t i = 0; i < params.size(); ++i) {
      at::Tensor& p = params[i];
      at::Tensor view = flat_params.narrow(0, offsets[i], p.numel()).view(p.sizes());
      {
        at::NoGradGuard no_grad;
        view.copy_(p);
      }
      p.set_data(view);
      param_edges.push_back(::torch::autograd::impl::gradient_edge(p));
    }
    attach_grads();
  }
  void attach_grads() {
    // Tensors over the flat gradients' memory that are no views in autograd's sense (an
    // optimizer's zero_grad detaches them in place, which a view refuses); each keeps the flat
    // array alive.
    for (std::size_t i = 0; i < params.size(); ++i)
      params[i].mutable_grad() = at::from_blob(
          static_cast<float*>(flat_grads.data_ptr()) + offsets[i], params[i].sizes(), [keep = flat_grads](void*) {},
          flat_grads.options());
  }

  /// Changes when autograd writes a parameter's .grad() (in place: its version; or a new tensor).
  std::uint64_t grads_fingerprint() const {
    std::uint64_t h = 0;
    for (const at::Tensor& p : params) {
      const at::Tensor& g = p.grad();
      h = h * 1000003u + (g.defined() ? reinterpret_cast<std::uintptr_t>(g.unsafeGetTensorImpl()) + g._version() : 1u);
    }
    return h;
  }

  void check_parameters() const {
    const auto* base = static_cast<const float*>(flat_params.data_ptr());
    for (std::size_t i = 0; i < params.size(); ++i) {
      const at::Tensor& p = params[i];
      if (p.data_ptr() != static_cast<const void*>(base + offsets[i]) || !p.is_contiguous())
        throw std::invalid_argument(who() + "'s parameter '" + names[i] + "' changed after binding (now shape " +
                                    detail::shape_text(p.sizes()) +
                                    "): pipetype owns its storage; change it in place or build a new stage");
    }
  }

  std::vector<at::Tensor> call_forward(const std::vector<at::Tensor>& inputs, bool grad) {
    at::AutoGradMode mode(grad);  // (a forward-only plan: as under NoGradGuard)
    try {
      return forward(inputs);
    } catch (const c10::Error& e) {  // (on a device: a forward that synchronises it, among others)
      throw std::runtime_error(who() + "'s forward failed in LibTorch: " + e.what_without_backtrace());
    }
  }

  ::torch::autograd::edge_list root_edges(const record& rec) const {
    ::torch::autograd::edge_list e;
    for (const auto& r : rec.roots) e.push_back(::torch::autograd::impl::gradient_edge(r));
    return e;
  }

  /// `src` (undefined: zeros) into a slot of pipetype's: a copy on the CPU, an asynchronous one
  /// on the current (the executor's) stream on a device.
  template <class T>
  void store(std::span<T> dst, const at::Tensor& src) const {
    if (device.is_cpu()) {
      if (!src.defined()) {
        std::memset(static_cast<void*>(dst.data()), 0, dst.size_bytes());
        return;
      }
      const at::Tensor c = src.contiguous();
      std::memcpy(static_cast<void*>(dst.data()), c.data_ptr(), dst.size_bytes());
      return;
    }
    at::Tensor to = at::from_blob(static_cast<void*>(dst.data()), {static_cast<std::int64_t>(dst.size())},
                                  at::TensorOptions().dtype(detail::scalar_type_of<T>()).device(device));
    if (!src.defined())
      to.zero_();
    else
      to.copy_(src.reshape({-1}), /*non_blocking=*/true);
  }

  void write_weight_grads(std::span<float> dst, const ::torch::autograd::variable_list& g, std::size_t from) const {
    if (dst.size() != static_cast<std::size_t>(flat_params.numel()))
      throw std::logic_error(who() + ": ctx.weight_grad holds " + std::to_string(dst.size()) + " elements, not " +
                             std::to_string(flat_params.numel()));
    for (std::size_t i = 0; i < params.size(); ++i) {
      float* out = dst.data() + offsets[i];
      const auto n = static_cast<std::size_t>(params[i].numel());
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

  // ---- the split backward (the top of torch/stage.hpp) --------------------------------------------
  /// I's first half: the frontier nodes of microbatch `rec`'s graph (where a parameter's gradient
  /// path leaves the inputs' in `ins`) and the roots that reach a parameter only. Returns whether W
  /// will read the root gradients (then I keeps copies of them).
  bool find_frontier(record& rec, const ::torch::autograd::edge_list& ins) const {
    const ::torch::autograd::edge_list roots = root_edges(rec);
    // The graph's nodes: which reach an input whose gradient is asked for, which a parameter.
    std::vector<const ::torch::autograd::Node*> in_nodes, param_nodes;
    for (const auto& e : ins) in_nodes.push_back(e.function.get());
    for (const auto& e : param_edges) param_nodes.push_back(e.function.get());
    const graph_walk flag = walk_graph(roots, in_nodes, param_nodes);
    const auto params_only = [&](const ::torch::autograd::Node* n) {  // leads to a parameter, to no input
      const std::uint8_t f = flag(n);
      return !(f & reaches_input) && (f & reaches_param);
    };
    // Where a parameter's gradient path leaves the inputs': the frontier nodes (reach an input,
    // and through another edge a parameter only) and their edges into the parameters' side.
    rec.frontier.clear();
    rec.root_transitions.clear();
    rec.exact = true;
    std::unordered_map<const ::torch::autograd::Node*, const ::torch::autograd::Node*> target_owner;
    for (::torch::autograd::Node* n : flag.order) {
      const std::uint8_t f = flag(n);
      if (!(f & reaches_input) || !(f & reaches_param)) continue;
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
    return !rec.exact || !rec.root_transitions.empty();
  }
  /// I's second half, with the root gradients `grads` (kept for W when find_frontier said so): the
  /// input gradients (returned, in `ins`' order), and the gradients flowing into each frontier
  /// node, kept in the record with the graph.
  ::torch::autograd::variable_list input_pass(record& rec, const ::torch::autograd::edge_list& ins,
                                              ::torch::autograd::variable_list grads, bool keep_root_grads) const {
    const ::torch::autograd::edge_list roots = root_edges(rec);
    ::torch::autograd::edge_list outs = ins;
    std::vector<std::size_t> first_capture;
    for (const auto& fn : rec.frontier) {
      first_capture.push_back(outs.size());
      for (std::uint32_t i = 0; i < fn.node->num_inputs(); ++i) outs.emplace_back(fn.node, i);
    }
    ::torch::autograd::variable_list g;
    if (!outs.empty() && rec.exact)
      g = run_engine(roots, grads, true, outs);
    else if (!ins.empty())
      g = run_engine(roots, grads, true, ins);
    if (rec.exact)
      for (std::size_t k = 0; k < rec.frontier.size(); ++k)
        for (std::uint32_t i = 0; i < rec.frontier[k].node->num_inputs(); ++i)
          rec.frontier[k].captured.push_back(g[first_capture[k] + i]);
    if (keep_root_grads) rec.kept_root_grads = std::move(grads);
    rec.split = true;
    return g;
  }
  /// W: the parameters' gradients of microbatch `rec`, from what I kept (or, when I could not
  /// split exactly, from the outputs again).
  ::torch::autograd::variable_list weight_pass(record& rec, int microbatch) {
    if (!rec.split)
      throw std::logic_error(who() + ": backward_weight of microbatch " + std::to_string(microbatch) +
                             " without its backward_input");
    last_exact = rec.exact;
    if (!rec.exact) return run_engine(root_edges(rec), rec.kept_root_grads, false, param_edges);
    // Phase 1: each frontier node's gradients into the parameters' side, from what I kept.
    ::torch::autograd::edge_list roots;
    ::torch::autograd::variable_list grads;
    const ::torch::autograd::edge_list all_roots = root_edges(rec);
    for (const std::size_t k : rec.root_transitions) {
      roots.push_back(all_roots[k]);
      grads.push_back(rec.kept_root_grads[k]);
    }
    for (auto& fn : rec.frontier) {
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
    if (roots.empty()) return {};
    return run_engine(roots, grads, false, param_edges);
  }
};

}  // namespace detail
}  // namespace pipetype::torch
