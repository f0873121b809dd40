// pipetype/graph/dag.hpp — stage graphs that are not chains: skip connections, several towers.
//
// A stage graph is a directed acyclic graph of S stages. An edge a → b says that stage b reads
// stage a's output: a forward of b waits for the forward of every producer, and a backward of a
// waits for the input gradient of every consumer. Stages with no incoming edge are *sources*
// (they read the batch given to step()); stages with no outgoing edge are *losses* (they compute
// a loss). A chain is the graph 0 → 1 → … → S−1.
//
// Two forms, one set of rules (check_dag):
//
//   stage_dag g{.stages = 4, .edges = {{0, 1}, {1, 2}, {2, 3}, {0, 2}}};   // data, sizes at run time
//   using net = pipetype::dag<pipetype::nodes<embed, block, block, head>,  // types, checked when
//                             pipetype::edges<pipetype::edge<0, 1>, pipetype::edge<1, 2>,
//                                             pipetype::edge<2, 3>, pipetype::edge<0, 2>>>;
//
// A `dag` holds its stages' objects (like `chain`), and checks at compile time that every edge
// names two existing stages, that the graph has no cycle, that each edge's producer gives the
// element type and extent its consumer takes, and — where the user declares them with
// `sources<...>` and `losses<...>` — that every stage is reached from a declared source and
// reaches a declared loss. A failing rule is a static_assert whose message says which, inside
// `detail::dag_rejected<rule, stage>`, which names the stage.
//
// Rules (check_dag returns the first that fails, as errc::invalid_graph with `stage` and a
// `detail` sentence):
//   1. at least one stage
//   2. every edge names stages in [0, S), and no edge goes from a stage to itself or repeats
//   3. every declared source or loss is a stage; a source has no incoming edge, a loss no
//      outgoing one
//   4. no cycle (the stage named is on one)
//   5. every stage without an incoming edge is a source (else nothing feeds it), and every stage
//      without an outgoing edge is a loss (else its output reaches no loss) — checked only when
//      sources / losses are declared; otherwise they are exactly those stages
//
// Detached edges (local learning: `{0, 1, true}`, or `detached_edge<0, 1>` in the type form):
// stage b reads stage a's output, but no gradient goes back to a over it (b's grad_input for it is
// empty, as a source's is). A stage none of whose outgoing edges carries a gradient back — all
// detached — is then a loss: it computes a loss of its own (writes ctx.loss, gets targets) and
// still sends its output forward. Rules 3 and 5 count attached edges only: a declared loss may
// have detached outgoing edges, and (with losses declared) a stage whose outgoing edges are all
// detached must be one, else no gradient reaches it (rule 6, `ungraded`).
//
// Order. `topological_order` lists the stages so that every producer comes before its consumers,
// taking the lowest-numbered ready stage first, so a graph whose edges all go from lower to
// higher numbers keeps the numbering (a chain is 0, 1, …). `predecessors` / `successors` list a
// stage's neighbours in edge order, the order in which a fan-in's inputs and a fan-out's
// gradients are taken (the latter summed in that order, so gradients do not depend on the
// schedule).
#pragma once

#include <algorithm>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipetype/core/program.hpp"
#include "pipetype/core/verdict.hpp"
#include "pipetype/graph/stage.hpp"

namespace pipetype {

struct stage_dag {
  int stages = 0;
  std::vector<stage_edge> edges{};
  std::vector<int> sources{};  // stages fed by the batch; empty: every stage without an incoming edge
  std::vector<int> losses{};   // stages that compute a loss; empty: every stage without an outgoing edge
};

/// The chain 0 → 1 → … → stages − 1.
constexpr stage_dag chain_dag(int stages) {
  stage_dag g;
  g.stages = stages;
  for (int s = 0; s + 1 < stages; ++s) g.edges.push_back({s, s + 1});
  return g;
}

/// The chain 0 ~ 1 ~ … ~ stages − 1 with every edge detached (local learning: each stage a loss).
constexpr stage_dag local_chain_dag(int stages) {
  stage_dag g = chain_dag(stages);
  for (stage_edge& e : g.edges) e.detached = true;
  return g;
}

/// The stages that feed `s`, in edge order.
constexpr std::vector<int> predecessors(const stage_dag& g, int s) {
  std::vector<int> out;
  for (const stage_edge& e : g.edges)
    if (e.to == s) out.push_back(e.from);
  return out;
}
/// The stages that `s` feeds, in edge order.
constexpr std::vector<int> successors(const stage_dag& g, int s) {
  std::vector<int> out;
  for (const stage_edge& e : g.edges)
    if (e.from == s) out.push_back(e.to);
  return out;
}

namespace detail {

/// The stages in a topological order, lowest ready stage first; fewer than g.stages entries
/// when there is a cycle. (Edges must be in range.)
constexpr std::vector<int> kahn_order(const stage_dag& g) { return link_order(links_of(g.stages, g.edges), g.stages); }

/// Which rule a stage graph breaks (a value a static_assert can test), where.
enum class dag_rule {
  ok,
  no_stages,
  edge_from_missing_stage,
  edge_to_missing_stage,
  self_edge,
  duplicate_edge,
  source_not_a_stage,
  source_with_input,
  loss_not_a_stage,
  loss_with_output,
  cycle,
  unreached,
  dead_end,
  ungraded
};
struct dag_fault {
  dag_rule rule = dag_rule::ok;
  int stage = -1;
  int edge = -1;
};

constexpr const char* dag_rule_text(dag_rule r) {
  switch (r) {
    case dag_rule::ok:
      return "";
    case dag_rule::no_stages:
      return "a stage graph needs at least one stage";
    case dag_rule::edge_from_missing_stage:
      return "an edge comes from a stage that does not exist";
    case dag_rule::edge_to_missing_stage:
      return "an edge goes to a stage that does not exist";
    case dag_rule::self_edge:
      return "an edge goes from a stage to itself";
    case dag_rule::duplicate_edge:
      return "an edge appears twice";
    case dag_rule::source_not_a_stage:
      return "a declared source is not a stage";
    case dag_rule::source_with_input:
      return "a source stage has an incoming edge";
    case dag_rule::loss_not_a_stage:
      return "a declared loss is not a stage";
    case dag_rule::loss_with_output:
      return "a loss stage has an outgoing edge that is not detached (a gradient would come back to it)";
    case dag_rule::cycle:
      return "the stage graph has a cycle through this stage";
    case dag_rule::unreached:
      return "no edge comes into this stage and it is no source: no source reaches it";
    case dag_rule::dead_end:
      return "no edge leaves this stage and it is no loss: it reaches no loss";
    case dag_rule::ungraded:
      return "every edge out of this stage is detached, so no gradient comes back to it, and it is no loss: declare "
             "it one (it computes its own) or attach an edge";
  }
  return "";
}

/// The first edge of `edges[0, before)` that repeats an earlier one, or `before`: the edges'
/// indices sorted by (from, to, index), so that each run of equal edges starts at its first
/// occurrence and its second entry is where it repeats — O(E log E), where comparing every pair
/// took a 2 MB file minutes. The edges must name stages in [0, stages).
constexpr int first_repeated_edge(const std::vector<stage_edge>& edges, int before, int stages) {
  std::vector<std::pair<long long, int>> keyed;  // (from · stages + to, index)
  keyed.reserve(static_cast<std::size_t>(before));
  for (int k = 0; k < before; ++k) {
    const stage_edge e = edges[static_cast<std::size_t>(k)];
    keyed.push_back({static_cast<long long>(e.from) * stages + e.to, k});
  }
  std::sort(keyed.begin(), keyed.end());
  int first = before;
  for (std::size_t k = 1; k < keyed.size(); ++k)
    if (keyed[k].first == keyed[k - 1].first && (k < 2 || keyed[k - 1].first != keyed[k - 2].first) &&
        keyed[k].second < first)
      first = keyed[k].second;
  return first;
}

/// The first rule (see the header comment) that `g` breaks. Linear in stages and edges (the
/// repeated-edge test: E log E), so a graph as large as pipetype::limits allows is checked at once.
constexpr dag_fault find_dag_fault(const stage_dag& g) {
  const int S = g.stages;
  if (S <= 0) return {dag_rule::no_stages};
  const int E = static_cast<int>(g.edges.size());
  // rule 2 in edge order: the first edge out of range, from a stage to itself, or repeating one before it
  dag_fault bad{};
  int at = E;
  for (int k = 0; k < E && at == E; ++k) {
    const stage_edge e = g.edges[static_cast<std::size_t>(k)];
    if (e.from < 0 || e.from >= S)
      bad = {dag_rule::edge_from_missing_stage, e.from, k}, at = k;
    else if (e.to < 0 || e.to >= S)
      bad = {dag_rule::edge_to_missing_stage, e.to, k}, at = k;
    else if (e.from == e.to)
      bad = {dag_rule::self_edge, e.from, k}, at = k;
  }
  if (const int k = first_repeated_edge(g.edges, at, S); k < at)
    return {dag_rule::duplicate_edge, g.edges[static_cast<std::size_t>(k)].from, k};
  if (at < E) return bad;
  // every edge is in range now: its adjacency lists, in edge order (core/program.hpp)
  const stage_links links = links_of(S, g.edges);
  const auto in = [&](int s) {
    return links.pred_begin[static_cast<std::size_t>(s) + 1] - links.pred_begin[static_cast<std::size_t>(s)];
  };
  const auto out = [&](int s) {
    return links.succ_begin[static_cast<std::size_t>(s) + 1] - links.succ_begin[static_cast<std::size_t>(s)];
  };
  const auto graded = [&](int s) {  // consumers that send s a gradient back
    return links.grad_begin[static_cast<std::size_t>(s) + 1] - links.grad_begin[static_cast<std::size_t>(s)];
  };
  std::vector<char> source, loss;  // declared
  source.assign(static_cast<std::size_t>(S), 0);
  loss.assign(static_cast<std::size_t>(S), 0);
  for (int s : g.sources) {
    if (s < 0 || s >= S) return {dag_rule::source_not_a_stage, s};
    if (in(s) > 0) return {dag_rule::source_with_input, s};
    source[static_cast<std::size_t>(s)] = 1;
  }
  for (int s : g.losses) {
    if (s < 0 || s >= S) return {dag_rule::loss_not_a_stage, s};
    if (graded(s) > 0) return {dag_rule::loss_with_output, s};
    loss[static_cast<std::size_t>(s)] = 1;
  }
  const std::vector<int> order = link_order(links, S);
  if (static_cast<int>(order.size()) < S) {
    // a stage left over lies on a cycle or after one; walk back along unordered producers (each
    // stage's first in edge order) until a stage repeats: that one is on the cycle
    std::vector<char> ordered, seen;
    ordered.assign(static_cast<std::size_t>(S), 0);
    seen.assign(static_cast<std::size_t>(S), 0);
    for (int s : order) ordered[static_cast<std::size_t>(s)] = 1;
    const auto first_unordered_producer = [&](int s) {
      for (int x = links.pred_begin[static_cast<std::size_t>(s)]; x < links.pred_begin[static_cast<std::size_t>(s) + 1];
           ++x)
        if (!ordered[static_cast<std::size_t>(links.pred[static_cast<std::size_t>(x)])])
          return links.pred[static_cast<std::size_t>(x)];
      return -1;
    };
    int s = 0;
    while (ordered[static_cast<std::size_t>(s)]) ++s;
    while (!seen[static_cast<std::size_t>(s)]) {  // each stage's producers read once: O(S + E)
      seen[static_cast<std::size_t>(s)] = 1;
      if (const int u = first_unordered_producer(s); u >= 0) s = u;
    }
    return {dag_rule::cycle, s};
  }
  for (int s = 0; s < S; ++s) {
    if (!g.sources.empty() && in(s) == 0 && !source[static_cast<std::size_t>(s)]) return {dag_rule::unreached, s};
    if (!g.losses.empty() && graded(s) == 0 && !loss[static_cast<std::size_t>(s)])
      return {out(s) == 0 ? dag_rule::dead_end : dag_rule::ungraded, s};
  }
  return {};
}

}  // namespace detail

/// The first rule (above) that `g` breaks, as errc::invalid_graph with the stage at fault in
/// `stage`, the edge (where one is) in `index` and the rule in `detail`; or an ok verdict.
constexpr verdict check_dag(const stage_dag& g) {
  const detail::dag_fault f = detail::find_dag_fault(g);
  if (f.rule == detail::dag_rule::ok) return {};
  return refusal(errc::invalid_graph, detail::dag_rule_text(f.rule)).on_stage(f.stage).on_index(f.edge);
}

/// The stages in an order where every producer precedes its consumers (lowest ready first);
/// empty when check_dag(g) fails.
constexpr std::vector<int> topological_order(const stage_dag& g) {
  if (!check_dag(g).ok()) return {};
  return detail::kahn_order(g);
}

namespace detail {

/// The stage rank r holds when a schedule of one stage per rank runs over `g` with p ranks:
/// the r-th of its topological order (the identity where the graph breaks a rule or has another
/// size: verify then says why).
constexpr std::vector<int> graph_placement(const stage_dag& g, int p) {
  std::vector<int> order;  // (not `c ? f() : vector{}`: g++ 12 destroys that twice in a constant expression)
  if (g.stages == p) order = topological_order(g);
  if (static_cast<int>(order.size()) != p) {
    order.clear();
    for (int r = 0; r < p; ++r) order.push_back(r);
  }
  return order;
}

/// Per stage, the edges on the longest path from it to a loss that a gradient comes back along
/// (stages taken in `order`, reversed; edges out of range ignored): 0 on a loss, so on every stage
/// of a graph whose edges are all detached. O(S + E): each stage's consumers listed once.
constexpr std::vector<int> depth_to_loss(const stage_dag& g, const std::vector<int>& order) {
  const int S = static_cast<int>(order.size());
  const stage_links links = links_of(S, g.edges);  // consumers in edge order, those out of range left out
  std::vector<int> depth;
  depth.assign(order.size(), 0);
  for (int k = S - 1; k >= 0; --k) {
    const auto s = static_cast<std::size_t>(order[static_cast<std::size_t>(k)]);
    for (int x = links.grad_begin[s]; x < links.grad_begin[s + 1]; ++x)
      depth[s] = std::max(depth[s], depth[static_cast<std::size_t>(links.grad[static_cast<std::size_t>(x)])] + 1);
  }
  return depth;
}

}  // namespace detail

/// True when g is the chain 0 → 1 → … → S − 1 (the stage graph every program has by default).
constexpr bool is_chain(const stage_dag& g) {
  if (static_cast<int>(g.edges.size()) != (g.stages > 0 ? g.stages - 1 : 0)) return false;
  for (int k = 0; k < static_cast<int>(g.edges.size()); ++k)
    if (!(g.edges[static_cast<std::size_t>(k)] == stage_edge{k, k + 1})) return false;
  return true;
}

// ---- the type form -----------------------------------------------------------------------

template <class... S>
struct nodes {};
template <int From, int To>
struct edge {
  static constexpr stage_edge value{From, To};
};
/// An edge that carries activations only: no gradient goes back (local learning).
template <int From, int To>
struct detached_edge {
  static constexpr stage_edge value{From, To, true};
};
template <class... E>
struct edges {};
template <int... S>
struct sources {};
template <int... S>
struct losses {};

namespace detail {

template <class T>
struct is_edge : std::false_type {};
template <int F, int T>
struct is_edge<edge<F, T>> : std::true_type {};
template <int F, int T>
struct is_edge<detached_edge<F, T>> : std::true_type {};

template <class E>
struct edge_list;
template <class... E>
struct edge_list<edges<E...>> {
  static_assert((is_edge<E>::value && ...),
                "pipetype::dag: every element of pipetype::edges<...> must be a "
                "pipetype::edge<from, to> or pipetype::detached_edge<from, to>");
  static constexpr std::size_t size = sizeof...(E);
  static constexpr stage_edge at(std::size_t k) {
    constexpr stage_edge all[] = {E::value..., stage_edge{}};
    return all[k];
  }
};

template <class L>
struct index_list;
template <int... S>
struct index_list<sources<S...>> {
  static constexpr std::vector<int> value() { return {S...}; }
};
template <int... S>
struct index_list<losses<S...>> {
  static constexpr std::vector<int> value() { return {S...}; }
};

/// Instantiated when a dag breaks a rule: the instantiation names the stage at fault.
template <dag_rule Rule, int Stage>
struct dag_rejected {
  static_assert(Rule != dag_rule::no_stages, "pipetype::dag: a stage graph needs at least one stage");
  static_assert(Rule != dag_rule::edge_from_missing_stage && Rule != dag_rule::edge_to_missing_stage,
                "pipetype::dag: an edge names a stage that does not exist (Stage in dag_rejected<..., Stage>)");
  static_assert(Rule != dag_rule::self_edge, "pipetype::dag: an edge goes from a stage to itself");
  static_assert(Rule != dag_rule::duplicate_edge, "pipetype::dag: an edge appears twice");
  static_assert(Rule != dag_rule::source_not_a_stage && Rule != dag_rule::loss_not_a_stage,
                "pipetype::dag: sources<...> or losses<...> names a stage that does not exist");
  static_assert(Rule != dag_rule::source_with_input, "pipetype::dag: a stage in sources<...> has an incoming edge");
  static_assert(Rule != dag_rule::loss_with_output,
                "pipetype::dag: a stage in losses<...> has an outgoing edge that is not detached");
  static_assert(Rule != dag_rule::cycle,
                "pipetype::dag: the stage graph has a cycle (through Stage in dag_rejected<..., Stage>)");
  static_assert(Rule != dag_rule::unreached,
                "pipetype::dag: a stage is not reached from any source: no edge comes into it and it is not in "
                "sources<...> (Stage in dag_rejected<..., Stage>)");
  static_assert(Rule != dag_rule::dead_end,
                "pipetype::dag: a stage reaches no loss: no edge leaves it and it is not in losses<...> (Stage in "
                "dag_rejected<..., Stage>)");
  static_assert(
      Rule != dag_rule::ungraded,
      "pipetype::dag: every edge out of a stage is a detached_edge, so no gradient comes back to it, and it is "
      "not in losses<...> (Stage in dag_rejected<..., Stage>)");
  static constexpr bool value = Rule == dag_rule::ok;
};

/// Edge K's producer must give what its consumer takes, tensor by tensor (the instantiation names
/// both stages; graph/stage.hpp's edge_tensor names the tensor).
template <int K, int From, int To, class Producer, class Consumer, int Pos = 0>
struct dag_link {
  static_assert(per_edge_count<Consumer>() == 0 || Pos < per_edge_count<Consumer>(),
                "pipetype::dag: a stage with per-edge inputs (per_edge<...>) has more incoming edges than input types "
                "(edge K, From -> To, in dag_link<K, From, To, ...>)");
  static constexpr bool value = edge_fits<true, K, From, To, Producer, Consumer, Pos>();
};

/// Edge K's position among its consumer's incoming edges (edge order).
template <class Edges>
constexpr int pred_position(std::size_t k) {
  int pos = 0;
  for (std::size_t i = 0; i < k; ++i) pos += Edges::at(i).to == Edges::at(k).to ? 1 : 0;
  return pos;
}

template <class Types, class Edges, std::size_t... K>
constexpr bool dag_links(std::index_sequence<K...>) {
  return (dag_link<static_cast<int>(K), Edges::at(K).from, Edges::at(K).to,
                   std::tuple_element_t<static_cast<std::size_t>(Edges::at(K).from), Types>,
                   std::tuple_element_t<static_cast<std::size_t>(Edges::at(K).to), Types>,
                   pred_position<Edges>(K)>::value &&
          ...);
}

template <bool Check, class Types, class Edges>
constexpr bool dag_links_if() {
  if constexpr (Check)
    return dag_links<Types, Edges>(std::make_index_sequence<Edges::size>{});
  else
    return true;
}

template <int N, class Edges, class Sources, class Losses>
constexpr stage_dag dag_topology() {
  stage_dag g;
  g.stages = N;
  for (std::size_t k = 0; k < edge_list<Edges>::size; ++k) g.edges.push_back(edge_list<Edges>::at(k));
  g.sources = index_list<Sources>::value();
  g.losses = index_list<Losses>::value();
  return g;
}

/// The stages' objects of a chain or dag, by index; never copied by the executor, so
/// parameters stay where the user put them.
template <class... S>
class stage_tuple {
 public:
  stage_tuple() = default;
  explicit stage_tuple(S... s) : stages_(std::move(s)...) {}
  template <std::size_t I>
  auto& stage() noexcept {
    return std::get<I>(stages_);
  }
  template <std::size_t I>
  const auto& stage() const noexcept {
    return std::get<I>(stages_);
  }
  /// f(index, stage&) for every stage, in index order.
  template <class F>
  void for_each_stage(F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (f(static_cast<int>(I), std::get<I>(stages_)), ...); }
    (std::make_index_sequence<sizeof...(S)>{});
  }

 private:
  std::tuple<S...> stages_;
};

}  // namespace detail

template <class Nodes, class Edges, class Sources = sources<>, class Losses = losses<>>
class dag;

/// A stage graph of stage types (nodes<...>) and edges between their indices, with optional
/// sources<...> and losses<...> (see the header comment). Holds the stages' objects.
template <class... S, class Edges, class Sources, class Losses>
class dag<nodes<S...>, Edges, Sources, Losses> : public detail::stage_tuple<S...> {
  static_assert((detail::diagnose_stage<S>() && ...), "pipetype::dag: every node must be a pipetype::stage");
  using edge_list = detail::edge_list<Edges>;

 public:
  static constexpr int stages = static_cast<int>(sizeof...(S));
  static constexpr bool is_graph = true;  // stage<I>() holds node I; topology() its graph
  using first_stage = std::tuple_element_t<0, std::tuple<S..., void>>;

  /// The graph as data.
  static constexpr stage_dag topology() { return detail::dag_topology<stages, Edges, Sources, Losses>(); }

 private:
  static constexpr detail::dag_fault fault_ =
      detail::find_dag_fault(detail::dag_topology<stages, Edges, Sources, Losses>());
  static_assert(detail::dag_rejected<fault_.rule, fault_.stage>::value);
  // the edges' types, once the edges name real stages
  static_assert(detail::dag_links_if<fault_.rule == detail::dag_rule::ok, std::tuple<S...>, edge_list>());

 public:
  dag() = default;
  explicit dag(S... s) : detail::stage_tuple<S...>(std::move(s)...) {}
  constexpr int size() const noexcept { return stages; }
};

}  // namespace pipetype
