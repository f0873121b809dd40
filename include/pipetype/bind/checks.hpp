// pipetype/bind/checks.hpp — a model against a plan, before anything runs.
//
// Every executor runs these when it is built, and each failure is an exception naming the
// place (the `who` prefix says which executor: "pipetype::host", "pipetype::cuda"):
//   • the plan has as many stages as the model (per lane, when it has several);
//   • stage s's output is what stage s+1 takes (each edge of a graph): as many tensors, each of
//     the same element type, with as many elements, carrying a gradient or not alike;
//   • a schedule that splits a stage's backward (I/W) meets a stage with backward_input and
//     backward_weight;
//   • determinism: a stage that accumulates its own weight gradients runs its B/W in microbatch
//     order (binding_options::ordered_gradients = false lifts this), and a plan with several
//     lanes (DualPipe) meets stages that hand their weight gradients to pipetype.
#pragma once

#include <algorithm>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipetype/bind/stage_entry.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/graph/chain.hpp"
#include "pipetype/graph/dag.hpp"
#include "pipetype/io/text.hpp"

namespace pipetype {

struct binding_options {
  bool ordered_gradients = true;  // require weight gradients in microbatch order (determinism)
  bool keep_outputs = false;      // the sinks write their outputs where the executor keeps them (outputs_of)
  bool place_stashes = true;      // false: the caller places the stashes (a step with memory actions,
                                  // mesh/memory_slots.hpp), and bind allocates none
};

namespace detail {

/// How many stages read model stage s's output, per model stage, under the plan's edges (one
/// lane's: program_view::lane_edges; none: a chain).
inline std::vector<int> consumers_of(const program_view& p) {
  const int L = p.lane_length();
  std::vector<int> n(static_cast<std::size_t>(L), 0);
  for (const stage_edge& e : p.lane_edges())
    if (e.from >= 0 && e.from < L) ++n[static_cast<std::size_t>(e.from)];
  return n;
}

/// The model fits the plan: one entry per model stage, each stage's output the next one's input.
/// `who` prefixes the message ("pipetype::host").
inline void check_model(const program_view& p, const std::vector<stage_entry>& entries, const std::string& who) {
  const int L = p.lane_length();  // the model's stages (the plan's, unless it has several lanes)
  if (static_cast<int>(entries.size()) != L)
    throw shape_error(who + ": the plan has " + std::to_string(p.stages) + " stages" +
                      (p.lanes > 1 ? " (" + std::to_string(p.lanes) + " lanes of " + std::to_string(L) + ")" : "") +
                      " but the model has " + std::to_string(entries.size()));
  // a model part (bind/part.hpp) holds some stages: an edge to one it does not hold is not seen here
  auto held = [&](int s) { return entries[static_cast<std::size_t>(s)].obj != nullptr; };
  auto link = [&](int from, int to, int position) {  // position: the edge's among `to`'s incoming edges
    if (!held(from) || !held(to)) return;
    const edge_shape& a = entries[static_cast<std::size_t>(from)].out;
    const edge_shape& b = entries[static_cast<std::size_t>(to)].in_over(position);
    const std::string edge = who + ": the edge " + std::to_string(from) + " -> " + std::to_string(to) + ": ";
    if (a.count != b.count)
      throw shape_error(edge + "stage " + std::to_string(from) + " gives " + std::to_string(a.count) +
                        " tensors but stage " + std::to_string(to) + " takes " + std::to_string(b.count));
    for (std::size_t k = 0; k < static_cast<std::size_t>(a.count); ++k) {
      const tensor_place &x = a.t[k], &y = b.t[k];
      const std::string at = a.count > 1 ? edge + "tensor " + std::to_string(k) + ": " : edge;
      if (x.size != y.size || x.type != y.type)
        throw shape_error(at + "stage " + std::to_string(from) + " gives elements of " + std::to_string(x.size) +
                          " bytes, stage " + std::to_string(to) + " takes " +
                          (x.size != y.size ? "elements of " + std::to_string(y.size) + " bytes" : "another type"));
      if (x.elems != y.elems)
        throw shape_error(at + "stage " + std::to_string(from) + " gives " + std::to_string(x.elems) +
                          " elements but stage " + std::to_string(to) + " takes " + std::to_string(y.elems));
      if (x.grad != y.grad)
        throw shape_error(at + "stage " + std::to_string(from) +
                          (x.grad ? " expects its gradient back but stage " + std::to_string(to) + " marks it no_grad"
                                  : " marks it no_grad but stage " + std::to_string(to) + " sends its gradient back") +
                          " (mark it no_grad on both sides, or on neither)");
      if (x.varies != y.varies)
        throw shape_error(at + "stage " + std::to_string(from) +
                          (x.varies ? " marks it varying" : " does not mark it varying") + " but stage " +
                          std::to_string(to) + (y.varies ? " does" : " does not"));
    }
  };
  // a stage with per-edge inputs has one type per incoming edge, no more, no fewer
  std::vector<int> incoming(entries.size(), 0);
  if (!p.has_edges())
    for (int s = 1; s < L; ++s) incoming[static_cast<std::size_t>(s)] = 1;
  for (const stage_edge& e : p.lane_edges()) ++incoming[static_cast<std::size_t>(e.to)];
  for (std::size_t s = 0; s < entries.size(); ++s)
    if (held(static_cast<int>(s)) && !entries[s].in_edges.empty() &&
        static_cast<int>(entries[s].in_edges.size()) != incoming[s])
      throw shape_error(who + ": stage " + std::to_string(s) + " declares " +
                        std::to_string(entries[s].in_edges.size()) + " per-edge inputs, but the stage graph gives it " +
                        std::to_string(incoming[s]) + " incoming edges");
  if (!p.has_edges()) {
    for (int s = 0; s + 1 < L; ++s) link(s, s + 1, 0);
    return;
  }
  const std::vector<int> position = edge_input_positions(p);  // lane 0's edges come first
  for (std::size_t k = 0; k < p.lane_edges().size(); ++k) link(p.edges[k].from, p.edges[k].to, position[k]);
  const std::vector<int> consumers = consumers_of(p);
  for (std::size_t s = 0; s < entries.size(); ++s) {
    if (consumers[s] > 1 && held(static_cast<int>(s)) && !entries[s].sums_outputs)
      throw shape_error(
          who + ": stage " + std::to_string(s) + " feeds " + std::to_string(consumers[s]) +
          " stages, so its gradients are summed, but its output type has no += and the stage no add_grad_output");
  }
}

inline void check_graph(const program_view& p, const stage_dag& g, const std::string& who);

/// The stages of `model`, once the plan is known to run the model's own stage graph: a dag's
/// edges, in its order (the order of a fan-in's inputs and of a fan-out's gradient sum), or a
/// chain's (a plan without edges). A plan of several lanes runs a copy of it in each, so lane 0's
/// edges are compared (verify has checked that the others are theirs shifted).
///
/// The comparison always runs: every stage_graph has topology() (graph/chain.hpp's has_topology,
/// static or a member, as uniform_chain's whose size is known at run time).
template <class M>
std::vector<stage_entry> entries_for(const program_view& p, M& model, const std::string& who) {
  static_assert(has_topology<M>,
                "pipetype: the model must say its stage graph (a member topology() giving a stage_dag), so that the "
                "executor can check that the plan runs it");
  check_graph(p, std::as_const(model).topology(), who);
  return entries_of(model);
}

/// The plan runs the stage graph `g` (see entries_for).
inline void check_graph(const program_view& p, const stage_dag& g, const std::string& who) {
  const std::span<const stage_edge> lane = p.lane_edges();
  // a plan without edges runs the chain of its lane length (check_model compares the stage counts)
  const bool same = is_chain(g) ? !p.has_edges() : std::equal(g.edges.begin(), g.edges.end(), lane.begin(), lane.end());
  if (!same) {
    auto edges = [](std::span<const stage_edge> es) {
      std::string t;
      for (const stage_edge& e : es)
        t += (t.empty() ? "" : ",") + std::to_string(e.from) + edge_mark(e) + std::to_string(e.to);
      return t;
    };
    throw shape_error(who + ": the plan runs " + (p.has_edges() ? "the stage graph " + edges(lane) : "a chain") +
                      " but the model's is " + (is_chain(g) ? "a chain" : edges(g.edges)) +
                      " (the same edges, in the same order)");
  }
}

/// An I or W action meets a stage that cannot split its backward.
inline void check_split(const stage_entry& e, const action& a, const std::string& who) {
  if ((a.what == kind::I || a.what == kind::W) && !e.split)
    throw std::invalid_argument(who + ": the schedule splits the backward (stage " + std::to_string(a.stage) +
                                ", microbatch " + std::to_string(a.microbatch) + ", action " + to_text(a) +
                                ") but the stage has no backward_input/backward_weight");
}

/// Weight gradients are made in an order every schedule agrees on: a stage that accumulates its
/// own (no weight_grad) must run its B/W in microbatch order (unless `ordered` is false), and a
/// plan with several lanes runs a model stage on two ranks, so pipetype must do the adding.
inline void check_gradients(const program_view& p, const std::vector<stage_entry>& entries, bool ordered,
                            const std::string& who) {
  const int L = p.lane_length();
  std::vector<int> last_weight_mb(static_cast<std::size_t>(p.stages), -1);
  for (const action& a : p.actions) {
    const stage_entry& e = entries[static_cast<std::size_t>(a.stage % L)];
    if (e.obj == nullptr) continue;  // a stage another rank holds (a model part)
    auto where = [&] {               // for a message only
      return "stage " + std::to_string(a.stage) + ", microbatch " + std::to_string(a.microbatch) + ", action " +
             to_text(a);
    };
    check_split(e, a, who);
    if (p.lanes > 1 && e.add == nullptr && (a.what == kind::B || a.what == kind::W))
      throw std::invalid_argument(who + ": " + where() + ": the plan runs the model's stage " +
                                  std::to_string(a.stage % L) + " in " + std::to_string(p.lanes) +
                                  " lanes (DualPipe's two directions) on different ranks at once, and the stage "
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

/// Instantiated for each stage type when a compile-time plan splits backwards into I and W; a
/// stage that offers only a full `backward` stops the build here, and the compiler's message
/// names it: `split_schedule_needs_backward_input_and_backward_weight<your_stage>`.
template <class Stage>
struct split_schedule_needs_backward_input_and_backward_weight {
  static_assert(has_split_backward<Stage>,
                "pipetype: the plan's schedule splits backwards into I and W, but this stage (named in the "
                "template argument above) offers only a full backward(); give it backward_input() and "
                "backward_weight(), or use a schedule that does not split (gpipe, 1f1b, interleaved-1f1b, ...)");
  static constexpr bool value = true;
};

template <class Plan, class Model>
constexpr bool stages_fit_plan() {
  if constexpr (requires { Plan::shape.split; }) {
    if constexpr (Plan::shape.split)
      return []<class... S>(std::tuple<S...>*) {
        return (split_schedule_needs_backward_input_and_backward_weight<S>::value && ...);
      }(static_cast<stage_types_t<Model>*>(nullptr));
  }
  return true;
}

}  // namespace detail
}  // namespace pipetype
