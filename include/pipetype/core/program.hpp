// pipetype/core/program.hpp — a compute program: each rank's ordered list of actions.
//
// This is what a schedule generator produces (docs/08_architecture.md, "generate"). It says nothing about
// transfers, streams or buffers yet; `lower()` adds those. Storage is rank-major CSR:
// actions of rank r are actions[begin[r] .. begin[r+1]).
//
// `program` owns its tables (std::vector, usable inside constant evaluation); `program_view`
// is the non-owning form every algorithm takes, so the same code reads a run-time program and
// the frozen tables of a compile-time `plan`.
//
// Lanes. The stage graph is a chain s → s+1 of all S stages, or (`lanes` = c > 1) c parallel
// lanes of L = S / c stages: lane k holds stages k·L .. k·L + L − 1, and microbatch j runs
// through lane j / (m / c) only. DualPipe uses two: both directions of the pipeline, each a
// copy of the model (stage k·L + i runs the model's stage i). ("Lane", not "chain": a chain is
// the stage graph of graph/chain.hpp; a lane is one copy of it that a share of the microbatches
// runs through.)
//
// Edges. A program may instead carry its stage graph as `edges` (graph/dag.hpp: skip
// connections, several towers): F(s,j) then reads F(u,j) of every producer u → s, and B/I(s,j)
// the input gradient of every consumer s → v. Empty edges mean the chain or lanes above, so a
// chain's tables and costs stay as they were. `stage_links` gives both forms as adjacency lists.
// With c lanes and edges, each lane is a copy of one graph of L stages: the edges come lane by
// lane, lane k's being lane 0's shifted by k·L in the same order (verify checks it), and
// `lane_edges()` is lane 0's, the model's own graph (DualPipe over a stage graph).
//
// Detached edges (local learning): an edge may be `detached`: the consumer reads the producer's
// output, but no gradient goes back over it. B/I(u,j) then waits for no consumer across it, the
// lowering sends no gradient for it, and a stage none of whose consumers is across an attached
// edge is a *loss* (`loss(s)`): it computes its own loss, as a chain's last stage does, while its
// output still travels forward. A program whose edges are all detached (`local-1f1b`) lets every
// stage run B right after F.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "pipetype/core/action.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/core/verdict.hpp"

namespace pipetype {

/// An edge of the stage graph: stage `to` reads stage `from`'s output (graph/dag.hpp).
struct stage_edge {
  int from = -1;
  int to = -1;
  bool detached = false;  // activations only: no gradient comes back over it (local learning)
  friend constexpr bool operator==(const stage_edge&, const stage_edge&) = default;
};
/// The mark between an edge's stages in pipetype's text forms: `0>1`, or `0~1` when detached.
constexpr char edge_mark(const stage_edge& e) noexcept { return e.detached ? '~' : '>'; }

/// "No rank": the value of `invalid_rank` when every action went to a valid rank.
inline constexpr int no_rank = -2147483647 - 1;

struct program_view {
  const char* name = "";
  int ranks = 0;
  int stages = 0;
  int microbatches = 0;
  std::span<const int> stage_rank;      // [stages]; -1 where no action names the stage
  std::span<const int> begin;           // [ranks + 1]
  std::span<const action> actions;      // [begin[ranks]]
  int invalid_rank = no_rank;           // a rank outside [0, ranks) that the builder was asked for
  verdict source_error{};               // set when the program came from text that did not parse
  int lanes = 1;                        // parallel lanes of the stage graph (see above)
  std::span<const stage_edge> edges{};  // the stage graph, when it is not the chain (see above)

  /// True when the program carries its stage graph as edges.
  constexpr bool has_edges() const noexcept { return !edges.empty(); }
  /// The model's stage graph as edges: lane 0's share (all of them with one lane; empty: a chain).
  constexpr std::span<const stage_edge> lane_edges() const noexcept {
    return lanes > 1 && edges.size() % static_cast<std::size_t>(lanes) == 0
               ? edges.first(edges.size() / static_cast<std::size_t>(lanes))
               : edges;
  }
  /// Stages per lane (all of them when `lanes` does not divide the stages: verify says so).
  constexpr int lane_length() const noexcept {
    return lanes > 1 && stages % lanes == 0 ? stages / lanes : (stages > 0 ? stages : 1);
  }
  /// True when stage s has no predecessor (the first stage of its lane; with edges, a source).
  constexpr bool lane_head(int s) const noexcept {
    if (has_edges()) {
      for (const stage_edge& e : edges)
        if (e.to == s) return false;
      return true;
    }
    return s % lane_length() == 0;
  }
  /// True when stage s has no successor (the last stage of its lane; with edges, a loss).
  constexpr bool lane_tail(int s) const noexcept {
    if (has_edges()) {
      for (const stage_edge& e : edges)
        if (e.from == s) return false;
      return true;
    }
    return (s + 1) % lane_length() == 0;
  }
  /// True when stage s computes a loss: no consumer sends it a gradient (the last stage of its
  /// lane; with edges, a stage whose outgoing edges are all detached or that has none).
  constexpr bool loss(int s) const noexcept {
    if (has_edges()) {
      for (const stage_edge& e : edges)
        if (e.from == s && !e.detached) return false;
      return true;
    }
    return lane_tail(s);
  }
  /// True when some edge is detached.
  constexpr bool has_detached() const noexcept {
    for (const stage_edge& e : edges)
      if (e.detached) return true;
    return false;
  }
  /// True when microbatch j runs through stage s.
  constexpr bool runs_through(int s, int j) const noexcept {
    if (lanes <= 1 || stages % lanes != 0 || microbatches % lanes != 0 || microbatches < lanes) return true;
    return s / lane_length() == j / (microbatches / lanes);
  }

  constexpr std::span<const action> rank_actions(int r) const {
    const auto b = static_cast<std::size_t>(begin[static_cast<std::size_t>(r)]);
    const auto e = static_cast<std::size_t>(begin[static_cast<std::size_t>(r) + 1]);
    return actions.subspan(b, e - b);
  }
  constexpr int size() const { return static_cast<int>(actions.size()); }
  /// True when some action is a backward split into I and W.
  constexpr bool split_backward() const {
    for (const action& a : actions)
      if (a.what == kind::I || a.what == kind::W) return true;
    return false;
  }
};

/// True when a program has actions and every one is a forward: a forward-only program
/// (evaluation, inference). verify then needs only each (stage, microbatch)'s F, the lowering
/// sends no gradient and frees each input once its F has read it, so about one activation per
/// edge is in flight; the executors run it like any other plan (the sinks still write losses).
constexpr bool is_forward_only(program_view p) noexcept {
  if (p.actions.empty()) return false;
  for (const action& a : p.actions)
    if (a.what != kind::F) return false;
  return true;
}

struct program {
  const char* name = "";
  int ranks = 0;
  int stages = 0;
  int microbatches = 0;
  std::vector<int> stage_rank;
  std::vector<int> begin;
  std::vector<action> actions;
  /// Set by the builder when an action was added to a rank outside [0, ranks) (-1 also when
  /// no rank was selected first); `no_rank` otherwise.
  int invalid_rank = no_rank;
  /// Set by the text parser when the source did not parse (line, column, reason).
  verdict source_error{};
  int lanes = 1;
  std::vector<stage_edge> edges{};  // empty: the chain (or lanes)

  constexpr program_view view() const {
    return {name, ranks, stages, microbatches, stage_rank, begin, actions, invalid_rank, source_error, lanes, edges};
  }
};

/// Builds a program rank by rank. Usable in a constexpr function.
/// Example:
///   constexpr pipetype::program two_rank() {
///     using pipetype::F, pipetype::B;
///     pipetype::program_builder b{/*ranks*/ 2, /*stages*/ 2, /*microbatches*/ 2};
///     b.rank(0).add(F(0, 0)).add(F(0, 1)).add(B(0, 0)).add(B(0, 1));
///     b.rank(1).add(F(1, 0)).add(B(1, 0)).add(F(1, 1)).add(B(1, 1));
///     return std::move(b).build("two-rank");
///   }
///   static_assert(pipetype::check_program(two_rank().view()).result.ok());
///
/// Placement: `place(stage, rank)` pins a stage; stages not pinned are placed on the rank whose
/// list first names them. Nothing is checked here: `verify` does that and names the place.
class program_builder {
 public:
  constexpr program_builder(int ranks, int stages, int microbatches)
      : ranks_(ranks),
        stages_(stages),
        microbatches_(microbatches),
        stage_rank_(static_cast<std::size_t>(stages > 0 && sized(ranks, stages) ? stages : 0), -1),
        count_(static_cast<std::size_t>(ranks > 0 && sized(ranks, stages) ? ranks : 0), 0) {}
  constexpr program_builder(const program_builder& o)
      : ranks_(o.ranks_),
        stages_(o.stages_),
        microbatches_(o.microbatches_),
        current_(o.current_),
        invalid_rank_(o.invalid_rank_),
        lanes_(o.lanes_),
        stage_rank_(o.stage_rank_),
        count_(o.count_),
        edges_(o.edges_) {
    reserve(o.size_);
    for (int i = 0; i < o.size_; ++i) buf_[i] = o.buf_[i];
    size_ = o.size_;
  }
  constexpr program_builder(program_builder&& o) noexcept
      : ranks_(o.ranks_),
        stages_(o.stages_),
        microbatches_(o.microbatches_),
        current_(o.current_),
        invalid_rank_(o.invalid_rank_),
        lanes_(o.lanes_),
        stage_rank_(std::move(o.stage_rank_)),
        count_(std::move(o.count_)),
        edges_(std::move(o.edges_)),
        buf_(o.buf_),
        size_(o.size_),
        cap_(o.cap_) {
    o.buf_ = nullptr;
    o.size_ = o.cap_ = 0;
  }
  program_builder& operator=(const program_builder&) = delete;
  program_builder& operator=(program_builder&&) = delete;
  constexpr ~program_builder() { delete[] buf_; }

  /// Selects the rank that `add` appends to.
  constexpr program_builder& rank(int r) {
    current_ = r;
    return *this;
  }
  constexpr program_builder& add(action a) {
    if (!sized(ranks_, stages_)) return *this;  // refused as too_large by verify: keep nothing
    if (current_ >= 0 && current_ < ranks_) {
      if (size_ == cap_) reserve(cap_ < 16 ? 16 : 2 * cap_);
      buf_[size_].a = a;
      buf_[size_].rank = current_;
      ++size_;
      ++count_.data()[current_];
    } else if (invalid_rank_ == no_rank) {
      invalid_rank_ = current_ == no_rank ? -1 : current_;
    }
    return *this;
  }
  /// Appends an overlapped pair (DualPipe's F&B): both start together on this rank.
  constexpr program_builder& add_overlapped(action forward, action backward) {
    forward.overlapped = true;
    backward.overlapped = false;
    return add(forward).add(backward);
  }
  constexpr program_builder& place(int stage, int r) {
    if (stage >= 0 && stage < static_cast<int>(stage_rank_.size())) stage_rank_[static_cast<std::size_t>(stage)] = r;
    return *this;
  }
  constexpr program_builder& placement(const std::vector<int>& stage_rank) {
    for (int s = 0; s < static_cast<int>(stage_rank_.size()) && s < static_cast<int>(stage_rank.size()); ++s)
      stage_rank_[static_cast<std::size_t>(s)] = stage_rank[static_cast<std::size_t>(s)];
    return *this;
  }
  /// Number of actions added to rank r so far.
  constexpr int size(int r) const {
    return r >= 0 && r < static_cast<int>(count_.size()) ? count_[static_cast<std::size_t>(r)] : 0;
  }
  /// Splits the stage graph into `c` parallel lanes (two for DualPipe's directions).
  constexpr program_builder& lanes(int c) {
    lanes_ = c;
    return *this;
  }
  /// Adds the edge from → to to the stage graph: the program's graph is then its edges, not the
  /// chain (verify checks them: graph/dag.hpp's rules).
  constexpr program_builder& edge(int from, int to, bool detached = false) {
    edges_.push_back({from, to, detached});
    return *this;
  }
  /// The whole stage graph as edges (replacing any given before).
  constexpr program_builder& graph(const std::vector<stage_edge>& edges) {
    edges_ = edges;
    return *this;
  }

  constexpr program build(const char* name = "custom") && {
    program p;
    p.name = name;
    p.ranks = ranks_;
    p.stages = stages_;
    p.microbatches = microbatches_;
    p.lanes = lanes_;
    if (!sized(ranks_, stages_)) {  // past pipetype::limits: sizes only, for verify to refuse
      p.begin.assign(1, 0);
      p.invalid_rank = invalid_rank_;
      return p;
    }
    p.begin.assign(static_cast<std::size_t>(ranks_ > 0 ? ranks_ + 1 : 1), 0);
    int* begin = p.begin.data();
    const int* count = count_.data();
    for (int r = 0; r < ranks_; ++r) begin[r + 1] = begin[r] + count[r];
    // rank-major, keeping each rank's order (a stable placement by rank)
    p.actions.resize(static_cast<std::size_t>(size_));
    action* out = p.actions.data();
    std::vector<int> next(p.begin.begin(), p.begin.end());
    int* cursor = next.data();
    for (int i = 0; i < size_; ++i) out[cursor[buf_[i].rank]++] = buf_[i].a;
    // stages not pinned go to the rank whose list names them first
    int* placed = stage_rank_.data();
    for (int k = 0; k < size_; ++k) {
      const int st = out[k].stage;
      if (st >= 0 && st < stages_ && placed[st] < 0) {
        int r = 0;
        while (begin[r + 1] <= k) ++r;
        placed[st] = r;
      }
    }
    p.stage_rank = std::move(stage_rank_);
    p.invalid_rank = invalid_rank_;
    p.lanes = lanes_;
    p.edges = std::move(edges_);
    return p;
  }

 private:
  // Tables are made only for sizes within pipetype::limits (core/sizes.hpp).
  static constexpr bool sized(int ranks, int stages) noexcept {
    return limits::exceeded(ranks, stages, 1, 0) == nullptr;  // the tables it makes: per rank, per stage
  }
  struct entry {
    action a;
    int rank;
  };
  constexpr void reserve(int cap) {
    if (cap <= cap_) return;
    entry* grown = new entry[static_cast<std::size_t>(cap)];
    for (int i = 0; i < size_; ++i) grown[i] = buf_[i];
    delete[] buf_;
    buf_ = grown;
    cap_ = cap;
  }

  int ranks_;
  int stages_;
  int microbatches_;
  int current_ = no_rank;
  int invalid_rank_ = no_rank;
  int lanes_ = 1;
  std::vector<int> stage_rank_;
  std::vector<int> count_;  // actions per rank
  std::vector<stage_edge> edges_;
  entry* buf_ = nullptr;  // actions in the order added, with their rank
  int size_ = 0;
  int cap_ = 0;
};

namespace detail {

/// A failing verdict of code `e` at action `a`, index `index` of rank `rank`'s list.
constexpr verdict at(errc e, int rank, const action& a, int index, const char* why = "") {
  return refusal(e, why)
      .on_rank(rank)
      .on_stage(a.stage)
      .on_microbatch(a.microbatch)
      .on_kind(kind_char(a.what))
      .on_index(index);
}

/// The index of (stage, microbatch) in a stage-major table of `m` microbatches per stage.
constexpr std::size_t key(int stage, int mb, int m) {
  return static_cast<std::size_t>(stage) * static_cast<std::size_t>(m) + static_cast<std::size_t>(mb);
}

/// A stage graph as adjacency lists, in edge order: pred[pred_begin[s] .. pred_begin[s + 1])
/// feed stage s; succ[succ_begin[s] ..) read it; grad[grad_begin[s] ..) are the consumers that
/// send s a gradient (succ without those across a detached edge: all of them when none is).
struct stage_links {
  std::vector<int> pred_begin, pred, succ_begin, succ, grad_begin, grad;
};

/// The adjacency lists of `stages` stages and `given` edges (those out of range left out).
constexpr stage_links links_of(int stages, std::span<const stage_edge> given) {
  const int S = stages > 0 ? stages : 0;
  std::vector<stage_edge> edges;
  for (const stage_edge& e : given)
    if (e.from >= 0 && e.from < S && e.to >= 0 && e.to < S) edges.push_back(e);
  stage_links out;
  out.pred_begin.assign(static_cast<std::size_t>(S + 1), 0);
  out.succ_begin.assign(static_cast<std::size_t>(S + 1), 0);
  for (const stage_edge& e : edges) {
    ++out.pred_begin[static_cast<std::size_t>(e.to + 1)];
    ++out.succ_begin[static_cast<std::size_t>(e.from + 1)];
  }
  for (int s = 0; s < S; ++s) {
    out.pred_begin[static_cast<std::size_t>(s + 1)] += out.pred_begin[static_cast<std::size_t>(s)];
    out.succ_begin[static_cast<std::size_t>(s + 1)] += out.succ_begin[static_cast<std::size_t>(s)];
  }
  out.pred.assign(edges.size(), 0);
  out.succ.assign(edges.size(), 0);
  std::vector<int> pn(out.pred_begin.begin(), out.pred_begin.end() - 1);
  std::vector<int> sn(out.succ_begin.begin(), out.succ_begin.end() - 1);
  for (const stage_edge& e : edges) {
    out.pred[static_cast<std::size_t>(pn[static_cast<std::size_t>(e.to)]++)] = e.from;
    out.succ[static_cast<std::size_t>(sn[static_cast<std::size_t>(e.from)]++)] = e.to;
  }
  out.grad_begin.assign(static_cast<std::size_t>(S + 1), 0);
  for (const stage_edge& e : edges)
    if (!e.detached) ++out.grad_begin[static_cast<std::size_t>(e.from + 1)];
  for (int s = 0; s < S; ++s)
    out.grad_begin[static_cast<std::size_t>(s + 1)] += out.grad_begin[static_cast<std::size_t>(s)];
  out.grad.assign(static_cast<std::size_t>(out.grad_begin[static_cast<std::size_t>(S)]), 0);
  std::vector<int> gn(out.grad_begin.begin(), out.grad_begin.end() - 1);
  for (const stage_edge& e : edges)
    if (!e.detached) out.grad[static_cast<std::size_t>(gn[static_cast<std::size_t>(e.from)]++)] = e.to;
  return out;
}

/// The activations a forward of stage s holds, in memory_model's terms, under adjacency lists with
/// `pred_begin`: one per input it reads (a source reads one, the batch).
constexpr int inputs_held(const int* pred_begin, int s) {
  const int n = pred_begin[s + 1] - pred_begin[s];
  return n > 1 ? n : 1;
}

/// A program's: its edges, or its lanes' chains.
constexpr stage_links links_of(program_view p) {
  if (p.has_edges()) return links_of(p.stages, p.edges);
  std::vector<stage_edge> chain;
  for (int s = 0; s + 1 < p.stages; ++s)
    if (!p.lane_tail(s)) chain.push_back({s, s + 1});
  return links_of(p.stages, chain);
}

/// The stages in a topological order of `links` (lowest ready first); fewer than `stages` when
/// the graph has a cycle. O((S + E) log S): the ready stages are a min-heap.
constexpr std::vector<int> link_order(const stage_links& links, int stages) {
  std::vector<int> indegree, order, ready;
  indegree.assign(static_cast<std::size_t>(stages > 0 ? stages : 0), 0);
  const auto lowest_first = [](int a, int b) { return a > b; };
  for (int s = 0; s < stages; ++s) {
    indegree[static_cast<std::size_t>(s)] =
        links.pred_begin[static_cast<std::size_t>(s) + 1] - links.pred_begin[static_cast<std::size_t>(s)];
    if (indegree[static_cast<std::size_t>(s)] == 0) ready.push_back(s);  // ascending: already a heap
  }
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), lowest_first);
    const int s = ready.back();
    ready.pop_back();
    order.push_back(s);
    for (int e = links.succ_begin[static_cast<std::size_t>(s)]; e < links.succ_begin[static_cast<std::size_t>(s) + 1];
         ++e)
      if (--indegree[static_cast<std::size_t>(links.succ[static_cast<std::size_t>(e)])] == 0) {
        ready.push_back(links.succ[static_cast<std::size_t>(e)]);
        std::push_heap(ready.begin(), ready.end(), lowest_first);
      }
  }
  return order;
}

/// Per stage, the rank whose actions run it (-1: no action names it).
constexpr std::vector<int> stage_owners(program_view p) {
  std::vector<int> owner(static_cast<std::size_t>(p.stages > 0 ? p.stages : 0), -1);
  for (int r = 0; r < p.ranks; ++r)
    for (const action& a : p.rank_actions(r)) owner[static_cast<std::size_t>(a.stage)] = r;
  return owner;
}

}  // namespace detail
/// The forward-only program of `p` (evaluation, inference): each rank's F actions in the order
/// `p` runs them, overlapped pairs split, its stage graph, placement and lanes kept. Any
/// training schedule gives one: `forward_only_of(make_one_f_one_b(4, 8))`, or as a type,
/// `forward_only<one_f_one_b<ranks<4>, microbatches<8>>>` (core/schedule.hpp).
constexpr program forward_only_of(program p) {
  std::vector<action> kept;
  std::vector<int> begin{0};
  for (int r = 0; r < p.ranks; ++r) {
    for (int k = p.begin[static_cast<std::size_t>(r)]; k < p.begin[static_cast<std::size_t>(r) + 1]; ++k) {
      action a = p.actions[static_cast<std::size_t>(k)];
      if (a.what != kind::F) continue;
      a.overlapped = false;
      kept.push_back(a);
    }
    begin.push_back(static_cast<int>(kept.size()));
  }
  p.actions = std::move(kept);
  p.begin = std::move(begin);
  return p;
}

}  // namespace pipetype
