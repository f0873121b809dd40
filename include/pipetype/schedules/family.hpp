// pipetype/schedules/family.hpp — a schedule family as tools see it: a name, a sentence, the
// stages per rank it uses, and its run-time generator.
//
// Each built-in family's header defines one descriptor type next to its compile-time schedule
// template (`one_f_one_b<ranks<4>, microbatches<8>>` names `one_f_one_b_family` as its `family`);
// registry.hpp holds the one list of them, from which the explorer's `--schedule` names,
// `--schedule all`, `make_schedule` and the "known: ..." message are all derived. A family of
// your own is a type meeting `schedule_family`:
//
//   struct my_family {
//     static constexpr std::string_view name = "mine", summary = "what it does, in a line";
//     static constexpr int chunks = 1;        // stages per rank: 0 = any (--chunks), else exactly this
//     static constexpr bool split = false;    // splits backwards into I and W
//     static constexpr const char* error(int p, int m, int v) noexcept;   // nullptr when valid
//     static constexpr program make(int p, int m, int v, const schedule_params&);
//     static constexpr bool graphs = true;    // optional: make() takes schedule_params::edges itself
//   };
//
// A stage graph (schedule_params::edges) reaches a family's make() only where it says `graphs`
// (gpipe, 1f1b and zb-h1 have graph forms that warm up by each stage's depth; zb-auto searches the
// graph's topological order); make_schedule runs every other family's chain program over
// the graph with over_graph below.
#pragma once

#include <concepts>
#include <string_view>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/graph/dag.hpp"

namespace pipetype {

/// A chain schedule run over the stage graph `g`: the chain's stage k becomes the k-th stage of
/// g's topological order (graph/dag.hpp), on the same rank, in the same place of every rank's
/// list, and the program carries g's edges. Valid for every such schedule, whatever its
/// placement: each edge u → v joins two positions k < k' of the order, so the chain's path
/// k → … → k' already orders F(u, j) before F(v, j) and v's backward before u's — the graph asks
/// for a subset of what the chain's run satisfies, so the relabelled program verifies and
/// completes whenever the chain's does. It keeps the chain's warm-ups, which the graph may not
/// need (1F1B and ZB-H1 have graph forms of their own that warm up by each stage's depth).
///
/// A program of c lanes (DualPipe's two directions) takes a graph of one lane's L stages: each
/// lane is relabelled alike (its stage i·L + k becomes i·L + order[k]) and carries its own copy of
/// g's edges, lane by lane (core/program.hpp). A program whose stage count (per lane) differs from
/// g's is returned unchanged, for verify to judge.
constexpr program over_graph(const program& chain, const stage_dag& g) {
  const int c = chain.lanes;
  if (c < 1 || chain.stages % c != 0 || g.stages != chain.stages / c ||
      static_cast<int>(chain.stage_rank.size()) != chain.stages)
    return chain;
  const int L = g.stages;
  const std::vector<int> order = detail::graph_placement(g, L);
  auto relabel = [&](int s) { return s - s % L + order[static_cast<std::size_t>(s % L)]; };
  std::vector<stage_edge> edges;
  for (int i = 0; i < c; ++i)
    for (const stage_edge& e : g.edges) edges.push_back({e.from + i * L, e.to + i * L, e.detached});
  program_builder b{chain.ranks, chain.stages, chain.microbatches};
  b.lanes(c).graph(edges);
  for (int k = 0; k < chain.stages; ++k) {
    const int r = chain.stage_rank[static_cast<std::size_t>(k)];
    if (r >= 0) b.place(relabel(k), r);
  }
  for (int r = 0; r < chain.ranks; ++r) {
    b.rank(r);
    for (const action& a : chain.view().rank_actions(r))
      b.add(action{a.what, relabel(a.stage), a.microbatch, a.overlapped});
  }
  return std::move(b).build(chain.name);
}

/// Where zb-auto places stages: one per rank, two per rank in a V (as ZB-V), or both tried and
/// the shorter rank span kept.
enum class search_placement { one_per_rank, v, automatic };

/// What the parametrised families need (zb-auto: costs and a memory limit).
struct schedule_params {
  costs cost{};
  double mem_limit = 0;  // microbatch activations per rank; 0 = none
  /// Each rank's relative speed (1 nominal, 0.5 takes twice as long; empty: all 1) and each
  /// microbatch's length relative to the others (empty: all 1): see `scaled_costs`.
  std::vector<double> rank_speed{};
  std::vector<double> microbatch_scale{};
  search_placement placement = search_placement::one_per_rank;
  /// The stage graph as edges between the p stages (empty: the chain): skip connections, several
  /// towers (graph/dag.hpp): make_schedule hands it to families with `graphs = true` and runs the
  /// others' chain programs over it (over_graph).
  std::vector<stage_edge> edges{};
  /// Each stage's time relative to `cost` (empty: all 1): an uneven split, as a layout's stage
  /// weights (analysis/layout_costs.hpp). With it `cost` is one unit's (a decoder layer's), not a
  /// rank's share, so zb-auto's V does not halve it. Stages past its end weigh 1.
  std::vector<double> stage_scale{};
};

template <class F>
concept schedule_family = requires(int p, int m, int v, const schedule_params& params) {
  { F::name } -> std::convertible_to<std::string_view>;
  { F::summary } -> std::convertible_to<std::string_view>;
  { F::chunks } -> std::convertible_to<int>;
  { F::split } -> std::convertible_to<bool>;
  { F::error(p, m, v) } -> std::same_as<const char*>;
  { F::make(p, m, v, params) } -> std::same_as<program>;
};

}  // namespace pipetype
