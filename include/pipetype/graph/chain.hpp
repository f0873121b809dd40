// pipetype/graph/chain.hpp — the stage graph: a chain of stages, stage s feeding stage s+1.
//
// Two forms, one interface (size(), for_each_stage):
//
//   chain<embed, block, block, head>   the stages as types, their objects inside (like a tuple);
//                                      each stage's output type must be the next one's input type,
//                                      checked at compile time (dynamic extents: at executor
//                                      construction)
//   uniform_chain<block>               n stages of one type, n known at run time (a model whose
//                                      depth follows --ranks and --chunks)
//
// Both are stage graphs of graph/dag.hpp's kind, the chain 0 → 1 → … (`topology()`); a graph
// with skip connections or several towers is a `dag`. Local learning (every stage trained on a
// loss of its own, no gradient between stages: schedules/local_1f1b.hpp) runs the chain with every
// edge detached, 0 ~ 1 ~ …: `local_chain<S...>`, or `uniform_chain<S>(stages, pipetype::local_learning)`.
// Every stage is then a loss: its forward writes ctx.loss and sends its output on, its backward
// gets an empty grad_output (it seeds its own) and an empty grad_input (nothing goes back).
//
// The executor reads the stages through `for_each_stage(f)`, which calls f(index, stage&) in
// chain order, and never copies them: parameters stay where the user put them.
//
//   pipetype::chain<embed, block, head> model{embed{...}, block{...}, head{...}};
//   model.stage<1>().weights ...;
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipetype/graph/dag.hpp"
#include "pipetype/graph/stage.hpp"

namespace pipetype {

namespace detail {
/// Stage `Index`'s output must be stage `Index + 1`'s input, tensor by tensor (the instantiation
/// names both; graph/stage.hpp's edge_tensor names the tensor).
template <std::size_t Index, class Producer, class Consumer>
struct chain_link {
  static constexpr bool value = edge_fits<false, static_cast<int>(Index), static_cast<int>(Index),
                                          static_cast<int>(Index) + 1, Producer, Consumer>();
};

template <class... S, std::size_t... I>
constexpr bool chain_links(std::index_sequence<I...>) {
  using types = std::tuple<S...>;
  return (chain_link<I, std::tuple_element_t<I, types>, std::tuple_element_t<I + 1, types>>::value && ...);
}
}  // namespace detail

template <class... S>
class chain : public detail::stage_tuple<S...> {
  static_assert(sizeof...(S) > 0, "pipetype::chain: a chain needs at least one stage");
  static_assert((detail::diagnose_stage<S>() && ...), "pipetype::chain: every element must be a pipetype::stage");
  static_assert(detail::chain_links<S...>(std::make_index_sequence<sizeof...(S) - 1>{}));

 public:
  static constexpr int stages = static_cast<int>(sizeof...(S));
  using first_stage = std::tuple_element_t<0, std::tuple<S...>>;

  chain() = default;
  explicit chain(S... s) : detail::stage_tuple<S...>(std::move(s)...) {}

  constexpr int size() const noexcept { return stages; }
  /// The stage graph as data: the chain 0 → 1 → … (graph/dag.hpp).
  static constexpr stage_dag topology() { return chain_dag(stages); }
};

/// The chain with every edge detached (local learning; see the header comment).
template <class... S>
class local_chain : public chain<S...> {
 public:
  using chain<S...>::chain;
  static constexpr stage_dag topology() { return local_chain_dag(chain<S...>::stages); }
};

/// Tag: a uniform_chain whose edges are all detached (local learning).
struct local_learning_t {
  explicit local_learning_t() = default;
};
inline constexpr local_learning_t local_learning{};

template <class S>
class uniform_chain {
  static_assert(detail::diagnose_stage<S>(), "pipetype::uniform_chain: the element must be a pipetype::stage");

 public:
  using first_stage = S;
  uniform_chain() = default;
  explicit uniform_chain(std::vector<S> s) : stages_(std::move(s)) {}
  uniform_chain(std::vector<S> s, local_learning_t) : stages_(std::move(s)), local_(true) {}

  int size() const noexcept { return static_cast<int>(stages_.size()); }
  /// True when every edge is detached (local learning).
  bool learns_locally() const noexcept { return local_; }
  stage_dag topology() const { return local_ ? local_chain_dag(size()) : chain_dag(size()); }
  S& stage(int i) { return stages_.at(static_cast<std::size_t>(i)); }
  const S& stage(int i) const { return stages_.at(static_cast<std::size_t>(i)); }
  std::vector<S>& stages() noexcept { return stages_; }
  template <class F>
  void for_each_stage(F&& f) {
    for (std::size_t i = 0; i < stages_.size(); ++i) f(static_cast<int>(i), stages_[i]);
  }

 private:
  std::vector<S> stages_;
  bool local_ = false;
};

/// The stage types of a model, as a std::tuple (one entry per distinct position of a chain; the
/// one type of a uniform_chain).
template <class M>
struct stage_types {  // any other stage graph: its first stage type stands for all
  using type = std::tuple<typename M::first_stage>;
};
template <class... S>
struct stage_types<chain<S...>> {
  using type = std::tuple<S...>;
};
template <class... S>
struct stage_types<local_chain<S...>> {
  using type = std::tuple<S...>;
};
template <class S>
struct stage_types<uniform_chain<S>> {
  using type = std::tuple<S>;
};
template <class M>
using stage_types_t = typename stage_types<M>::type;

/// A model that says its stage graph: `m.topology()` callable on a const model (static or not),
/// giving a stage_dag. Every executor compares it with the plan's graph before it runs, so a model
/// without it is no stage_graph (a guard that quietly skipped the comparison once let a plan of
/// another graph run a chain model). chain, uniform_chain and dag all have it.
template <class M>
concept has_topology = requires(const M& m) {
  { m.topology() } -> std::convertible_to<stage_dag>;
};

/// Anything the executor can run: stages with size(), for_each_stage and their graph (topology()).
template <class M>
concept stage_graph = stage<typename M::first_stage> && has_topology<M> && requires(M& m) {
  { m.size() } -> std::convertible_to<int>;
};

}  // namespace pipetype
