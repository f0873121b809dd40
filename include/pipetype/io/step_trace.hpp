// pipetype/io/step_trace.hpp — one step as drawable events, simulated or measured.
//
// The SVG drawer (io/svg.hpp) and the Chrome trace writer (io/chrome_trace.hpp) take a
// `step_trace`, so a simulation and a measured step are drawn by the same code:
//
//   trace_of(plan.compute(), simulate(plan.compute(), c), {.latency = c.comm})   simulated
//   trace_of(executor.trace())                                                    measured
//   trace_of(mesh_program, simulate_mesh(mesh_program, c, d))                    a mesh step
//
// A step_trace holds, in one time unit (`unit`: "" for the simulator's cost units, "ms" for a
// measured step):
//   computes    one span per compute action on its rank (an overlapped pair of a simulation is
//               one span with both actions; the host executor runs the halves one after the
//               other, so a measured pair is two spans), in each rank's order, with the live
//               activations on the rank after it
//   comms       the spans of a rank's communication stream: one per NCCL group (measured only;
//               the simulator models a transfer as a latency, not as a stream)
//   transfers   one per activation or gradient that crosses ranks: from which span on the
//               sender to which span on the receiver. Simulated: from the producing action to
//               the consuming one, sent at the producer's end and arrived `latency` later.
//               Measured: from the sender's group to the receiver's group (the NCCL pair of
//               the send and its receive), sent at the first's start, arrived at the second's end.
//               In the order they were sent.
//   collectives one span per collective of a mesh step on its rank's data-parallel stream
//               (mesh/lower.hpp), named by its action: REDUCE_GRAD(1), UNSHARD(2), TIE(0)
//   copies      one span per OFFLOAD(0,3) / RELOAD(0,3) on its rank's copy stream; a RECOMPUTE is a
//               compute span labelled 0R3 (mesh/memory_actions.hpp)
// Its figures (makespan, busy, bubble fraction, peak activations) are computed the way
// analysis/simulate.hpp computes them, so a measured step reads on the same scale.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "pipetype/analysis/costs.hpp"
#include "pipetype/analysis/simulate.hpp"
#include "pipetype/compile/lowered.hpp"
#include "pipetype/mesh/simulate.hpp"
#include "pipetype/mesh/verify.hpp"
#include "pipetype/core/memory.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/io/write_schedule.hpp"

namespace pipetype {

/// One compute span: an action, or both halves of an overlapped pair.
struct traced_compute {
  int rank = -1;
  action first{};
  action second{};  // the pair's second half when `paired`
  bool paired = false;
  double start = 0, end = 0;
  double activations = 0;  // live activations on the rank after the span
  double high = 0;         // the most during it (a pair: after its first half)
  bool recompute = false;  // a RECOMPUTE of `first` (mesh/memory_actions.hpp), labelled 0R3

  std::string label() const {
    if (recompute) return std::to_string(first.stage) + 'R' + std::to_string(first.microbatch);
    return paired ? '(' + to_text(first) + ';' + to_text(second) + ')' : to_text(first);
  }
};

/// One span on a rank's communication stream (a measured NCCL group).
struct traced_comm {
  int rank = -1;
  double start = 0, end = 0;
  int transfers = 0;  // sends and receives inside it
};

/// One collective of a mesh step on a rank's data-parallel stream.
struct traced_collective {
  int rank = -1;
  std::string name;  // "REDUCE_GRAD(1)", "UNSHARD(2)", "TIE(0)"
  int comm = -1;     // the mesh communicator
  double start = 0, end = 0;
};

/// An activation (what = F) or a gradient (what = B) crossing ranks.
struct traced_transfer {
  kind what = kind::F;
  int stage = -1, microbatch = -1;  // the stage that produced it
  int from = -1, to = -1;           // ranks
  double sent = 0, arrived = 0;
  bool via_comm = false;  // from_span / to_span index `comms` (measured) or `computes` (simulated)
  int from_span = -1, to_span = -1;

  /// "activation 1F3" or "gradient 2B3".
  std::string label() const {
    return (what == kind::F ? "activation " : "gradient ") + std::to_string(stage) + (what == kind::F ? 'F' : 'B') +
           std::to_string(microbatch);
  }
};

struct step_trace {
  int ranks = 0;
  std::string unit;  // "" (cost units) or "ms"
  bool measured = false;
  std::vector<traced_compute> computes;  // by rank, each rank's in its order
  std::vector<traced_comm> comms;
  std::vector<traced_transfer> transfers;
  std::vector<traced_collective> collectives;  // a mesh step's, by rank
  std::vector<traced_collective> copies;       // OFFLOAD(0,3) and RELOAD(0,3) on each rank's copy stream
  /// The stage graph, when the program gives it as edges (empty: a chain): one lane's edges
  /// (program_view::lane_edges), the lanes, and per stage of the program the rank that runs it
  /// (svg draws the graph under the timeline).
  std::vector<stage_edge> edges{};
  int graph_stages = 0;  // one lane's stages (the edges name [0, graph_stages))
  int lanes = 1;
  std::vector<int> stage_rank{};

  /// The first start and the last end over every span, computes and comms (0 when empty).
  double begin() const { return edge(false); }
  double finish() const { return edge(true); }
  /// First compute start to last compute end, as timeline::makespan.
  double makespan() const {
    if (computes.empty()) return 0;
    double lo = computes.front().start, hi = computes.front().end;
    for (const traced_compute& c : computes) lo = std::min(lo, c.start), hi = std::max(hi, c.end);
    return hi - lo;
  }
  double busy(int r) const {
    double b = 0;
    for (const traced_compute& c : computes)
      if (c.rank == r) b += c.end - c.start;
    return b;
  }
  /// Σ idle / (ranks × makespan), as timeline::bubble_fraction.
  double bubble_fraction() const {
    const double ms = makespan();
    if (ms <= 0 || ranks == 0) return 0;
    double busy_all = 0;
    for (const traced_compute& c : computes) busy_all += c.end - c.start;
    return (ranks * ms - busy_all) / (ranks * ms);
  }
  double peak_activations(int r) const {
    double p = 0;
    for (const traced_compute& c : computes)
      if (c.rank == r) p = std::max(p, c.high);
    return p;
  }
  /// The largest over the ranks.
  double peak_activations() const {
    double p = 0;
    for (const traced_compute& c : computes) p = std::max(p, c.high);
    return p;
  }

 private:
  double edge(bool last) const {
    double t = 0;
    bool any = false;
    auto see = [&](double a, double b) {
      const double x = last ? b : a;
      t = !any ? x : last ? std::max(t, x) : std::min(t, x);
      any = true;
    };
    for (const traced_compute& c : computes) see(c.start, c.end);
    for (const traced_comm& c : comms) see(c.start, c.end);
    for (const traced_collective& c : collectives) see(c.start, c.end);
    for (const traced_collective& c : copies) see(c.start, c.end);
    return t;
  }
};

struct trace_options {
  std::string unit{};           // simulated: the unit of the costs ("" for cost units, "ms", "us")
  double latency = 0;           // simulated: a transfer arrives this long after its producer ends
  double activation_scale = 1;  // activations are multiplied by this (1 / v: a rank's share of the model)
  memory_model memory{};        // measured: how each kind changes the live activations
  int ranks = 0;                // measured: the plan's ranks (0: the highest rank in the trace + 1;
                                // give it, so ranks with nothing to do still get their row)
};

namespace detail {
/// Transfers in the order they were sent (then by sender, kind, stage, microbatch).
inline void by_time(std::vector<traced_transfer>& v) {
  std::stable_sort(v.begin(), v.end(), [](const traced_transfer& x, const traced_transfer& y) {
    if (x.sent != y.sent) return x.sent < y.sent;
    if (x.from != y.from) return x.from < y.from;
    if (x.what != y.what) return x.what < y.what;
    return x.stage != y.stage ? x.stage < y.stage : x.microbatch < y.microbatch;
  });
}

struct constant_latency {
  double value;
  constexpr double latency(int, int) const noexcept { return value; }
};

template <class Latency>
step_trace trace_of(program_view p, const timeline& t, const Latency& lat, const trace_options& o) {
  step_trace out;
  out.ranks = p.ranks;
  out.unit = o.unit;
  if (!t.complete || t.start.size() != p.actions.size()) return out;  // nothing ran as drawn
  const int S = p.stages, m = p.microbatches;
  const std::size_t n = static_cast<std::size_t>(S) * static_cast<std::size_t>(m);
  const std::vector<int> owner = detail::stage_owners(p);
  std::vector<int> span_of(p.actions.size(), -1);  // action → its compute span
  std::vector<int> fwd(n, -1), bwd(n, -1);         // (stage, mb) → action index of F, of B/I
  for (int r = 0; r < p.ranks; ++r) {
    const auto b = static_cast<std::size_t>(p.begin[static_cast<std::size_t>(r)]);
    const auto e = static_cast<std::size_t>(p.begin[static_cast<std::size_t>(r) + 1]);
    for (std::size_t k = b; k < e; ++k) {
      const action& a = p.actions[k];
      const std::size_t q = detail::key(a.stage, a.microbatch, m);
      if (a.what == kind::F) fwd[q] = static_cast<int>(k);
      if (is_input_backward(a.what)) bwd[q] = static_cast<int>(k);
      if (k > b && p.actions[k - 1].overlapped) {  // second half: joins its pair's span
        span_of[k] = span_of[k - 1];
        traced_compute& c = out.computes.back();
        c.second = a, c.paired = true;
        c.activations = o.activation_scale * t.live_after[k] / t.unit;
        c.high = std::max(c.high, c.activations);
        continue;
      }
      span_of[k] = static_cast<int>(out.computes.size());
      const double live = o.activation_scale * t.live_after[k] / t.unit;
      out.computes.push_back({r, a, {}, false, t.start[k], t.end[k], live, live});
    }
  }
  const detail::stage_links links = detail::links_of(p);  // a chain's neighbours, or the edges
  for (std::size_t k = 0; k < p.actions.size(); ++k) {
    const action& a = p.actions[k];
    const int to = owner[static_cast<std::size_t>(a.stage)];
    auto cross = [&](int producer, kind what, int stage) {
      if (producer < 0) return;
      const int from = owner[static_cast<std::size_t>(stage)];
      if (from == to) return;
      const double sent = t.end[static_cast<std::size_t>(producer)];
      out.transfers.push_back({what, stage, a.microbatch, from, to, sent, sent + lat.latency(stage, a.stage), false,
                               span_of[static_cast<std::size_t>(producer)], span_of[k]});
    };
    const auto st = static_cast<std::size_t>(a.stage);
    if (a.what == kind::F)  // one transfer per producer
      for (int e = links.pred_begin[st]; e < links.pred_begin[st + 1]; ++e) {
        const int producer_stage = links.pred[static_cast<std::size_t>(e)];
        cross(fwd[detail::key(producer_stage, a.microbatch, m)], kind::F, producer_stage);
      }
    if (is_input_backward(a.what))  // and per consumer
      for (int e = links.grad_begin[st]; e < links.grad_begin[st + 1]; ++e) {  // (not over a detached edge)
        const int consumer = links.grad[static_cast<std::size_t>(e)];
        cross(bwd[detail::key(consumer, a.microbatch, m)], kind::B, consumer);
      }
  }
  by_time(out.transfers);
  if (p.has_edges()) {
    out.edges.assign(p.lane_edges().begin(), p.lane_edges().end());
    out.graph_stages = p.lane_length();
    out.lanes = p.lanes;
    out.stage_rank = owner;
  }
  return out;
}
}  // namespace detail

/// A simulated step: `t` from simulate(p, c), drawn with c's transfer latencies. A timeline that
/// did not complete (the program cannot finish) gives no spans.
template <cost_source C>
step_trace trace_of(program_view p, const timeline& t, const C& c, const trace_options& o = {}) {
  return detail::trace_of(p, t, c, o);
}

/// The same with one latency for every transfer, `o.latency` (what `costs` and `cost_model` have).
inline step_trace trace_of(program_view p, const timeline& t, const trace_options& o = {}) {
  return detail::trace_of(p, t, detail::constant_latency{o.latency}, o);
}

/// A mesh step as simulated (simulate_mesh, in cost units): per global rank its compute spans (an
/// overlapped pair one span, as the simulator times it), its collectives and its memory actions;
/// no memory curve.
inline step_trace trace_of(const mesh_program& mp, const mesh_timeline& t) {
  step_trace out;
  out.ranks = mp.shape.size();
  if (!t.completed || t.start.size() != mp.ops.size()) return out;
  for (int g = 0; g < out.ranks; ++g) {
    const int b = mp.begin[static_cast<std::size_t>(g)], e = mp.begin[static_cast<std::size_t>(g) + 1];
    for (int i = b; i < e; ++i) {
      const mesh_op& o = mp.ops[static_cast<std::size_t>(i)];
      const double t0 = t.start[static_cast<std::size_t>(i)], t1 = t.end[static_cast<std::size_t>(i)];
      if (o.code == mesh_op_code::compute) {
        traced_compute c{g, action{o.what, o.stage, o.microbatch, o.overlapped}, {}, false, t0, t1};
        if (o.overlapped)  // the pair's second half: the next compute op of the rank
          for (int j = i + 1; j < e; ++j)
            if (mp.ops[static_cast<std::size_t>(j)].code == mesh_op_code::compute) {
              const mesh_op& h = mp.ops[static_cast<std::size_t>(j)];
              c.second = action{h.what, h.stage, h.microbatch, false};
              c.paired = true;
              i = j;
              break;
            }
        out.computes.push_back(c);
      } else if (is_collective(o.code) || o.code == mesh_op_code::local_sum || o.code == mesh_op_code::optimizer_step) {
        out.collectives.push_back({g, detail::mesh_op_label(o, false), o.comm, t0, t1});
      } else if (is_copy(o.code)) {
        out.copies.push_back({g, detail::mesh_op_label(o, false), -1, t0, t1});
      } else if (o.code == mesh_op_code::recompute) {
        traced_compute c{g, action{kind::F, o.stage, o.microbatch, false}, {}, false, t0, t1};
        c.recompute = true;
        out.computes.push_back(c);
      }
    }
  }
  return out;
}

/// A measured step: the host executor's trace() (seconds), in milliseconds.
inline step_trace trace_of(std::span<const op_time> measured, const trace_options& o = {}) {
  step_trace out;
  out.unit = "ms";
  out.measured = true;
  constexpr double ms = 1e3;
  struct end_point {
    kind what;
    int stage, microbatch, rank, comm;
    bool send;
  };
  std::vector<end_point> ends;
  std::vector<int> live;
  int group = -1;
  out.ranks = std::max(o.ranks, 0);
  // a forward-only step (evaluation, inference): an activation lives only through its F
  const bool forwards_only = std::all_of(measured.begin(), measured.end(), [](const op_time& x) {
    return x.code != op_code::compute || x.what == kind::F;
  });
  for (const op_time& e : measured) {
    if (e.rank < 0) continue;  // not an op of any rank
    out.ranks = std::max(out.ranks, e.rank + 1);
    if (static_cast<int>(live.size()) < out.ranks) live.resize(static_cast<std::size_t>(out.ranks), 0);
    switch (e.code) {
      case op_code::compute: {
        if (e.start < 0) break;  // not run (a failed step)
        int& l = live[static_cast<std::size_t>(e.rank)];
        l += o.memory.delta(e.what);
        const double now = o.activation_scale * l / o.memory.unit;
        if (forwards_only) l -= o.memory.delta(e.what);
        out.computes.push_back(
            {e.rank, action{e.what, e.stage, e.microbatch, false}, {}, false, ms * e.start, ms * e.end, now, now});
        break;
      }
      case op_code::group:
        group = e.start < 0 ? -1 : static_cast<int>(out.comms.size());
        if (group >= 0) out.comms.push_back({e.rank, ms * e.start, ms * e.end, 0});
        break;
      case op_code::send:
      case op_code::recv:
        if (group < 0 || out.comms[static_cast<std::size_t>(group)].rank != e.rank) break;
        ++out.comms[static_cast<std::size_t>(group)].transfers;
        ends.push_back({e.what, e.stage, e.microbatch, e.rank, group, e.code == op_code::send});
        break;
      case op_code::collective: {  // a mesh step's collective (a record or wait has no name)
        if (!e.name || e.start < 0) break;
        const std::string label = e.name;  // "REDUCE_GRAD(1) on communicator 5"
        const std::size_t on = label.find(" on communicator ");
        const int comm = on == std::string::npos ? -1 : std::stoi(label.substr(on + 17));
        out.collectives.push_back({e.rank, label.substr(0, on), comm, ms * e.start, ms * e.end});
        break;
      }
    }
  }
  // pair each send with its receive: one transfer per (kind, producing stage, microbatch)
  std::sort(ends.begin(), ends.end(), [](const end_point& x, const end_point& y) {
    if (x.what != y.what) return x.what < y.what;
    if (x.stage != y.stage) return x.stage < y.stage;
    if (x.microbatch != y.microbatch) return x.microbatch < y.microbatch;
    return x.send > y.send;
  });
  for (std::size_t k = 0; k + 1 < ends.size(); ++k) {
    const end_point &s = ends[k], &r = ends[k + 1];
    if (!s.send || r.send || s.what != r.what || s.stage != r.stage || s.microbatch != r.microbatch) continue;
    out.transfers.push_back({s.what, s.stage, s.microbatch, s.rank, r.rank,
                             out.comms[static_cast<std::size_t>(s.comm)].start,
                             out.comms[static_cast<std::size_t>(r.comm)].end, true, s.comm, r.comm});
    ++k;
  }
  detail::by_time(out.transfers);
  return out;
}

namespace detail {
/// The median (of an even count, the mean of the middle two); 0 when empty.
inline double median_of(std::vector<double>& v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}
}  // namespace detail

/// The cost model a measured step implies, in its unit (ms): per stage and kind the median
/// length of its spans; as the base for anything else, the median per kind over all stages (B
/// from I + W when no full backward ran); and the transfer latency as the simulator means it:
/// over the transfers whose consumer waited for them (its rank was free before the producer
/// ended), the median of the consumer's start − the producer's end. The simulator, the explorer and zb_auto then work
/// from the step's own numbers (docs/04_host_execution.md).
inline cost_model measure_costs(const step_trace& t) {
  int stages = 0, m = 0;
  for (const traced_compute& c : t.computes) {
    stages = std::max({stages, c.first.stage + 1, c.paired ? c.second.stage + 1 : 0});
    m = std::max({m, c.first.microbatch + 1, c.paired ? c.second.microbatch + 1 : 0});
  }
  std::vector<std::vector<double>> per(static_cast<std::size_t>(stages * kind_count));
  std::vector<double> all[kind_count];
  for (const traced_compute& c : t.computes) {
    if (c.paired) continue;  // a simulated pair's halves have no lengths of their own
    const double d = c.end - c.start;
    per[static_cast<std::size_t>(c.first.stage * kind_count + static_cast<int>(c.first.what))].push_back(d);
    all[static_cast<std::size_t>(c.first.what)].push_back(d);
  }
  auto base_of = [&](kind k) { return detail::median_of(all[static_cast<std::size_t>(k)]); };
  costs base;
  base.f = base_of(kind::F);
  const double b = base_of(kind::B), i = base_of(kind::I), w = base_of(kind::W);
  const bool split = !all[static_cast<std::size_t>(kind::I)].empty();
  base.b = all[static_cast<std::size_t>(kind::B)].empty() && split ? i + w : b;
  if (split) base.i = i, base.w = w;
  // the latency: for each transfer whose consumer waited for it (its rank was free before the
  // producer ended), the consumer's start − the producer's end; the median of those
  std::vector<int> fwd(static_cast<std::size_t>(stages) * static_cast<std::size_t>(m), -1), bwd = fwd;
  std::vector<double> prev_end(t.computes.size(), -1);
  for (std::size_t k = 0; k < t.computes.size(); ++k) {
    const traced_compute& c = t.computes[k];
    if (k > 0 && t.computes[k - 1].rank == c.rank) prev_end[k] = t.computes[k - 1].end;
    for (int side = 0; side < (c.paired ? 2 : 1); ++side) {
      const action& a = side == 0 ? c.first : c.second;
      const std::size_t q = detail::key(a.stage, a.microbatch, m);
      if (a.what == kind::F) fwd[q] = static_cast<int>(k);
      if (is_input_backward(a.what)) bwd[q] = static_cast<int>(k);
    }
  }
  std::vector<double> lat;
  for (const traced_transfer& x : t.transfers) {
    const int to_stage = x.what == kind::F ? x.stage + 1 : x.stage - 1;
    if (x.stage < 0 || x.stage >= stages || to_stage < 0 || to_stage >= stages || x.microbatch < 0 || x.microbatch >= m)
      continue;
    const std::vector<int>& table = x.what == kind::F ? fwd : bwd;
    const int from = table[detail::key(x.stage, x.microbatch, m)], to = table[detail::key(to_stage, x.microbatch, m)];
    if (from < 0 || to < 0) continue;
    const traced_compute &pc = t.computes[static_cast<std::size_t>(from)],
                         &cc = t.computes[static_cast<std::size_t>(to)];
    // the consumer's rank was free before the producer ended, so it waited for this input
    if (cc.start >= pc.end && prev_end[static_cast<std::size_t>(to)] <= pc.end) lat.push_back(cc.start - pc.end);
  }
  base.comm = detail::median_of(lat);
  cost_model out(base);
  for (int s = 0; s < stages; ++s)
    for (int k = 0; k < kind_count; ++k) {
      std::vector<double>& v = per[static_cast<std::size_t>(s * kind_count + k)];
      if (!v.empty()) out.stage(s, static_cast<kind>(k), detail::median_of(v));
    }
  return out;
}

}  // namespace pipetype
