// libFuzzer harness over the path every schedule file takes: read → verify → lower → verify the
// lowered program → simulate → write back (pipetype's text, PyTorch's compute-only and
// compute+comms CSV) → read again. Built by the `clang` preset (clang++ with ASan and UBSan), so
// a crash, undefined behaviour or a leak fails it as well as the properties below:
//   - a rejected file has a sentence, and a deadlock's wait-for cycle is a chain of real links;
//   - a file with an `edges` line that verifies simulates to completion and its text form reads
//     back the same graph and actions; lowered, it takes every check below but PyTorch's forms;
//   - a verified plan simulates to completion, with a finite positive makespan, a bubble in
//     [0, 1), spanning its actions, and per-rank peaks equal to the verifier's; its lowering is
//     proved by the tick certificate; drawn as an SVG and a Chrome trace, it has a box and an
//     event per span and an arrow and a flow per transfer;
//   - each written form reads back to the same compute program, and the compute+comms form's own
//     transfers verify (docs/03 and docs/07 say what each form keeps) — except a program with an
//     empty rank before a busy one, which no written form keeps for pipetype's reader (below).
//   - stage graphs: check_dag's first fault (rule 2 by sorting) is the one a pairwise reading in
//     edge order finds, for every graph a file gives;
//   - the trainers' --file path (examples/trainer_file.hpp): a file they take, checked against a
//     chain model of its stages as the executors check it, is refused (pipetype::shape_error) when
//     it gives a stage graph and bound otherwise — never skipped, never a crash;
//   - the mesh step (issue 41): a file's UNSHARD, RESHARD and REDUCE_GRAD (collectives_of) or the
//     placed ones (place_collectives) that check_collectives accepts lower over two replicas
//     (lower_mesh), prove (verify_mesh), simulate to a finite makespan (simulate_mesh), and, as a
//     compute+comms CSV (to_csv with collectives), read back to collectives that check again; a
//     refusal has a sentence;
//   - memory actions: a file's OFFLOAD, RELOAD and RECOMPUTE (memory_actions_of) that
//     check_memory_actions accepts lower onto the copy stream and prove (verify_mesh,
//     verify_memory), and read back from to_text(program, memory) the same; the pass
//     (place_memory, plan_memory with a limit) answers a placement that checks and proves, or a
//     sentence; sizes past limits::saved_bytes are refused;
//   - layouts: a comment line `#layout STRING` (the schedule reader skips it) is parsed as a
//     Megatron layout; its weights are within pipetype::cost_bounds, and over a verified plan of as
//     many stages its costs simulate to a finite makespan and its peaks are finite.
// Inputs past pipetype::limits::file_bytes are skipped, as the tools refuse them before reading;
// larger ones than -max_len reaches are tests/examples/large_input.py's.
//
//   ./build/clang/tests/fuzz/fuzz_schedule -dict=tests/fuzz/schedule.dict NEW_DIR tests/fuzz/corpus
#include <pipetype/bind/checks.hpp>
#include <pipetype/pipetype.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "trainer_file.hpp"

namespace pt = pipetype;

namespace {

[[noreturn]] void broken(const char* property, const std::string& detail) {
  std::fprintf(stderr, "fuzz_schedule: property broken: %s\n  %s\n", property, detail.c_str());
  std::abort();
}

void expect(bool ok, const char* property, const pt::runtime_plan& plan) {
  if (!ok) broken(property, "plan: " + pt::describe(plan.result) + "\n" + pt::to_text(plan.compute()));
}

bool same_compute(pt::program_view a, pt::program_view b) {
  if (a.ranks != b.ranks || a.actions.size() != b.actions.size()) return false;
  for (int r = 0; r < a.ranks; ++r) {
    const auto x = a.rank_actions(r), y = b.rank_actions(r);
    if (x.size() != y.size()) return false;
    for (std::size_t k = 0; k < x.size(); ++k)
      if (!(x[k] == y[k])) return false;
  }
  return true;
}

void check_rejected(const pt::runtime_plan& plan) {
  const pt::verdict& v = plan.result;
  expect(!pt::describe(v).empty() && !pt::explain(v).empty(), "a rejection has a sentence", plan);
  if (v.code != pt::errc::cross_rank_deadlock) return;
  expect(v.cycle_length >= 2, "a deadlock has at least two links", plan);
  const int kept = v.cycle_length < pt::max_cycle ? v.cycle_length : pt::max_cycle;
  expect(v.cycle[0].rank == v.rank, "the cycle starts at the reported rank", plan);
  for (int i = 0; i < kept; ++i) {
    expect(v.cycle[i].from != v.cycle[i].rank && v.cycle[i].rank >= v.rank,
           "a link leads to another rank, the first is the lowest", plan);
    if (i + 1 < kept) expect(v.cycle[i].from == v.cycle[i + 1].rank, "each link leads to the next", plan);
  }
  if (kept == v.cycle_length) expect(v.cycle[kept - 1].from == v.rank, "the last link closes the cycle", plan);
}

void check_accepted(const pt::runtime_plan& plan) {
  const pt::program_view p = plan.compute();
  const pt::timeline t = pt::simulate(plan);
  expect(t.complete, "a verified plan simulates to completion", plan);
  const double span = t.makespan();
  expect(std::isfinite(span) && span > 0, "the makespan is finite and positive", plan);
  const double bubble = t.bubble_fraction();
  expect(bubble >= 0 && bubble < 1, "the bubble is in [0, 1)", plan);
  double first = t.start[0], last = t.end[0];
  for (std::size_t k = 0; k < p.actions.size(); ++k) {
    expect(t.start[k] >= 0 && t.end[k] > t.start[k], "every action takes time", plan);
    first = t.start[k] < first ? t.start[k] : first;
    last = t.end[k] > last ? t.end[k] : last;
  }
  expect(std::abs((last - first) - span) <= 1e-9 * span, "the makespan spans the actions", plan);
  for (int r = 0; r < p.ranks; ++r)
    expect(t.peak_activations(r) == plan.peak_activations(r), "simulated and verified peaks agree", plan);
  for (std::size_t k = 0; k < p.actions.size(); ++k)
    expect(plan.facts.tick[k] >= 0 && plan.facts.tick[k] < plan.ticks(), "every action has a tick", plan);
  bool by_certificate = false;
  expect(pt::verify_lowered(plan.lowered(), &by_certificate).ok() && by_certificate,
         "the lowering carries a valid tick certificate", plan);

  // drawn: the SVG and the Chrome trace hold one box / one event per span and one arrow / flow
  // per transfer, and the trace's figures are the simulator's
  const pt::step_trace tr = pt::trace_of(p, t);
  std::size_t pairs = 0;
  for (const pt::action& a : p.actions) pairs += a.overlapped ? 1 : 0;
  expect(tr.computes.size() == p.actions.size() - pairs, "a span per action, a pair as one", plan);
  expect(std::abs(tr.makespan() - span) <= 1e-9 * span, "the drawn makespan is the simulated one", plan);
  auto count = [](const std::string& s, std::string_view what) {
    std::size_t n = 0;
    for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  pt::svg_options so;
  so.transfers = true;
  const std::string svg = pt::svg(tr, so);
  expect(svg.size() > 6 && svg.compare(svg.size() - 7, 7, "</svg>\n") == 0, "the SVG is closed", plan);
  expect(count(svg, "class=\"span\"") == tr.computes.size(), "a box per span", plan);
  expect(count(svg, "class=\"transfer\" marker-end") == tr.transfers.size() + 1,
         "an arrow per transfer (and the legend's)", plan);
  std::size_t sends = 0;
  for (const pt::lowered_op& o : plan.lowered().ops) sends += o.code == pt::op_code::send ? 1 : 0;
  expect(tr.transfers.size() == sends, "a transfer per lowered send", plan);
  const std::string json = pt::chrome_trace(tr);
  expect(count(json, "\"ph\": \"X\"") == tr.computes.size(), "an event per span", plan);
  expect(count(json, "\"ph\": \"s\"") == tr.transfers.size() && count(json, "\"ph\": \"f\"") == tr.transfers.size(),
         "a flow per transfer", plan);

  // A rank with no actions is written as a blank line (a rank to torch's csv reader), which
  // pipetype's reader skips (docs/07): trailing ones come back with read_options::ranks, one
  // before a rank with actions does not survive a write.
  bool gap = false;
  for (int r = 0, seen_empty = 0; r < p.ranks; ++r) {
    if (p.rank_actions(r).empty())
      seen_empty = 1;
    else
      gap = gap || seen_empty;
  }
  if (gap) return;
  // pipetype's text form reads back to the same program
  pt::read_options sized;
  sized.ranks = p.ranks;
  const pt::program text = pt::parse_schedule(pt::to_text(p), sized);
  expect(text.source_error.ok() && same_compute(p, text.view()), "the text form reads back the same", plan);
  if (p.lanes > 1 || p.has_edges()) return;  // PyTorch's files hold neither lanes nor edges (to_csv refuses them)
  const pt::program csv = pt::parse_schedule(pt::to_csv(p), sized);
  expect(csv.source_error.ok() && same_compute(p, csv.view()), "the compute-only CSV reads back the same", plan);
  const pt::program comms = pt::parse_schedule(pt::to_csv(p, plan.lowered()), sized);
  expect(comms.source_error.ok(), "the compute+comms CSV's transfers verify", plan);
  expect(same_compute(p, comms.view()), "the compute+comms CSV reads back the same compute", plan);
}

/// A program over a stage graph given as edges that verified: it simulates to completion and its
/// text form reads back the same graph and actions.
void check_graph(const pt::runtime_plan& plan) {
  const pt::program_view p = plan.compute();
  expect(pt::simulate(p, pt::costs{.comm = 0.5}).complete, "a verified graph program simulates to completion", plan);
  pt::read_options sized;
  sized.ranks = p.ranks;
  const pt::program text = pt::parse_schedule(pt::to_text(p), sized);
  expect(text.source_error.ok() && same_compute(p, text.view()) &&
             std::equal(text.edges.begin(), text.edges.end(), p.edges.begin(), p.edges.end()),
         "a graph program's text form reads back the same", plan);
}

/// The first fault of rule 2 (graph/dag.hpp) read the slow way: each edge in order against its
/// range, itself and every edge before it.
pt::detail::dag_fault pairwise_rule_2(const pt::stage_dag& g) {
  for (int k = 0; k < static_cast<int>(g.edges.size()); ++k) {
    const pt::stage_edge e = g.edges[static_cast<std::size_t>(k)];
    if (e.from < 0 || e.from >= g.stages) return {pt::detail::dag_rule::edge_from_missing_stage, e.from, k};
    if (e.to < 0 || e.to >= g.stages) return {pt::detail::dag_rule::edge_to_missing_stage, e.to, k};
    if (e.from == e.to) return {pt::detail::dag_rule::self_edge, e.from, k};
    for (int l = 0; l < k; ++l)
      if (g.edges[static_cast<std::size_t>(l)] == e) return {pt::detail::dag_rule::duplicate_edge, e.from, k};
  }
  return {};
}

void check_dag_rules(const pt::program& prog) {
  if (prog.edges.empty() || prog.edges.size() > 2048 || prog.stages < 1) return;  // (pairwise is quadratic)
  const pt::stage_dag g{prog.stages, prog.edges};
  const pt::detail::dag_fault slow = pairwise_rule_2(g), fast = pt::detail::find_dag_fault(g);
  const bool rule_2 = slow.rule != pt::detail::dag_rule::ok;
  if (rule_2 ? (fast.rule != slow.rule || fast.stage != slow.stage || fast.edge != slow.edge)
             : (fast.rule >= pt::detail::dag_rule::edge_from_missing_stage &&
                fast.rule <= pt::detail::dag_rule::duplicate_edge))
    broken("check_dag's first fault of rule 2 is the pairwise reading's",
           "fast " + std::to_string(static_cast<int>(fast.rule)) + " at edge " + std::to_string(fast.edge) +
               ", pairwise " + std::to_string(static_cast<int>(slow.rule)) + " at edge " + std::to_string(slow.edge));
}

/// A stage for the trainers' model (the executors' checks need its shape only).
struct chain_stage {
  using input = pt::tensor<float, 8>;
  using output = pt::tensor<float, 8>;
  void forward(const pt::forward_ctx<chain_stage>&) {}
  void backward(const pt::backward_ctx<chain_stage>&) {}
  void backward_input(const pt::backward_ctx<chain_stage>&) {}
  void backward_weight(const pt::backward_ctx<chain_stage>&) {}
};

/// train_mlp's --file path, up to the executor's checks: a chain model of the plan's stages.
void check_trainer_file(const pt::program& prog, const pt::runtime_plan& plan) {
  const std::string why = examples::trainer_file_refusal(prog, "file", {}, false);
  if (!why.empty()) {
    expect(!prog.edges.empty() || prog.ranks > 64 || prog.stages > 2048 || prog.microbatches > 4096,
           "the trainers refuse a file for its graph or its size only", plan);
    return;
  }
  if (!plan.ok()) return;  // (a file that does not parse is refused by build_plan, where it says why)
  expect(prog.edges.empty(), "train_mlp refuses every file with an `edges` line", plan);
  pt::uniform_chain<chain_stage> model{
      std::vector<chain_stage>(static_cast<std::size_t>(plan.compute().lane_length()))};
  pt::program_view p = plan.compute();
  const std::vector<pt::stage_entry> entries = pt::detail::entries_for(p, model, "fuzz");  // a chain: must bind
  pt::detail::check_model(p, entries, "fuzz");
  // the same plan claiming a skip connection: the chain model is refused, not run as a chain
  if (p.lane_length() >= 3 && p.lanes == 1) {
    const std::vector<pt::stage_edge> skip{{0, 2}};
    p.edges = skip;
    bool refused = false;
    try {
      (void)pt::detail::entries_for(p, model, "fuzz");
    } catch (const pt::shape_error&) {
      refused = true;
    }
    expect(refused, "a chain model against a graph plan is refused", plan);
  }
}

/// `#layout STRING` in the file: the layout's weights and, over a plan of as many stages, its
/// costs and peaks.
void check_layout(std::string_view text, const pt::runtime_plan& plan) {
  const std::size_t at = text.find("#layout ");
  if (at == std::string_view::npos) return;
  std::string_view line = text.substr(at + 8);
  line = line.substr(0, line.find('\n'));
  const pt::layer_layout l = pt::parse_layout(line);
  if (!l.ok()) {
    expect(l.error.column >= 1 && l.error.column <= static_cast<int>(line.size()) + 1 && l.error.detail != nullptr,
           "a bad layout names its column and why", plan);
    return;
  }
  expect(l.size() >= 1 && l.size() <= 65536, "a layout has stages within its bound", plan);
  const pt::cost_model c = pt::layout_costs(l, pt::costs{.f = 1e9, .b = 2e9, .comm = 1e9});
  expect(pt::scale_error({}, {}, pt::layout_weights(l)) == nullptr && c.error() == nullptr,
         "a layout's weights are within pipetype::cost_bounds", plan);
  if (!plan.ok() || plan.compute().stages != l.size()) return;
  const pt::timeline t = pt::simulate(plan.compute(), c);
  expect(t.complete && std::isfinite(t.makespan()) && std::isfinite(t.bubble_fraction()),
         "a layout's costs simulate to finite figures", plan);
  for (const double x : pt::layout_peak_activations(plan.compute(), l))
    expect(std::isfinite(x) && x >= 0, "a layout's peaks are finite", plan);
}

/// A refused mesh or memory step: a sentence, never an empty one.
void expect_sentence(const pt::verdict& v, const char* property, const pt::runtime_plan& plan) {
  expect(!v.ok() && !pt::describe(v).empty(), property, plan);
}

/// The step over two replicas with `c`: lowers, proves, simulates, and its CSV reads back.
void check_mesh_step(const pt::runtime_plan& plan, const pt::collective_program& c, const pt::dp_options& o) {
  const pt::program_view p = plan.compute();
  const pt::mesh m{p.ranks, o.dp};
  if (!pt::check_mesh(m).ok() ||
      !pt::check_mesh_ops(m, static_cast<long long>(plan.lowered().ops.size() + c.ops.size())).ok())
    return;
  const pt::mesh_program mp = pt::lower_mesh(p, plan.lowered(), m, c, o);
  expect(pt::verify_mesh(mp).ok(), "accepted collectives lower to a step that proves", plan);
  for (const int n : mp.param_slots)
    expect(n <= std::max(1, o.window), "a sharded rank's parameter pool holds at most the window", plan);
  // buckets: each REDUCE_GRAD as `buckets` all-reduces; GRAD_NORM: one on every global rank
  std::size_t reductions = 0, bucketed = 0, norms = 0, checks = 0, steps = 0, stepped = 0, synced = 0;
  for (const pt::collective& x : c.ops) {
    reductions += x.what == pt::collective_kind::reduce_grad ? 1 : 0;
    steps += x.what == pt::collective_kind::optimizer_step ? 1 : 0;
  }
  for (const pt::mesh_op& x : mp.ops) {
    bucketed += x.bucket >= 0 ? 1 : 0;
    norms += x.code == pt::mesh_op_code::grad_norm ? 1 : 0;
    checks += x.code == pt::mesh_op_code::finite_check ? 1 : 0;
    stepped += x.code == pt::mesh_op_code::optimizer_step ? 1 : 0;
    synced += x.code == pt::mesh_op_code::param_sync ? 1 : 0;
  }
  // the optimizer: an OPT_STEP a stage with a gradient on every replica, ZeRO-1's PARAM_SYNC after each
  expect(stepped == steps * static_cast<std::size_t>(o.dp) && (steps > 0) == pt::steps_optimizer(o),
         "an OPT_STEP a stage on every replica when the step runs the optimizer", plan);
  expect(synced == (o.zero > 0 && o.dp > 1 ? stepped : 0), "ZeRO-1 gathers each stage after its OPT_STEP", plan);
  if (o.buckets > 1 && o.dp > 1)
    expect(bucketed == reductions * static_cast<std::size_t>(o.dp * o.buckets),
           "a bucketed step reduces each stage in its buckets on every replica", plan);
  expect(norms == (o.grad_norm ? static_cast<std::size_t>(m.size()) : 0), "GRAD_NORM once on every global rank", plan);
  expect(checks == (o.finite_check ? static_cast<std::size_t>(m.size()) : 0), "FINITE_CHECK once on every global rank",
         plan);
  const pt::mesh_timeline t =
      pt::simulate_mesh(mp, pt::costs{}, pt::mesh_costs{.param_bytes = {1e3}, .bandwidth = 1e3});
  expect(t.completed && std::isfinite(t.makespan) && t.makespan > 0, "a proved mesh step simulates to completion",
         plan);
  if (p.lanes > 1 || p.has_edges()) return;  // (PyTorch's files hold neither)
  const pt::schedule_file back = pt::read_schedule(pt::to_csv(p, plan.lowered(), c));
  expect(back.error.ok(), "a mesh step's CSV reads back", plan);
  const pt::collective_program again = pt::collectives_of(back, p.ranks);
  pt::dp_options named = o;  // (GRAD_NORM and the optimizer have no PyTorch names: the CSV leaves them out)
  named.grad_norm = false;
  named.finite_check = false;
  named.optimizer = false;
  named.zero = 0;
  expect(pt::check_collectives(p, again, named).ok(), "a mesh step's CSV reads back to collectives that check", plan);
}

void check_collectives_of(const pt::schedule_file& file, const pt::runtime_plan& plan) {
  const pt::program_view p = plan.compute();
  if (p.lanes > 1) return;  // (no mesh over DualPipe's lanes yet)
  if (pt::has_collectives(file)) {
    const pt::collective_program c = pt::collectives_of(file, p.ranks);
    bool shard = false;
    for (const pt::collective& x : c.ops) shard = shard || x.what == pt::collective_kind::unshard;
    const pt::dp_options o{.dp = 2, .shard = shard};
    const pt::verdict v = pt::check_collectives(p, c, o);
    if (!v.ok()) return expect_sentence(v, "refused collectives have a sentence", plan);
    check_mesh_step(plan, c, o);
    return;
  }
  if (pt::is_forward_only(p)) return;
  for (const bool shard : {false, true}) {
    const pt::dp_options o{.dp = 2, .shard = shard, .optimizer = shard};  // (FSDP: its optimizer on the shard)
    const pt::collective_program c = pt::place_collectives(p, o);
    expect(pt::check_collectives(p, c, o).ok(), "placed collectives check", plan);
    check_mesh_step(plan, c, o);
  }
  // the step's end in the plan: reductions in three buckets, then the global gradient norm
  const pt::dp_options ended{.dp = 2, .buckets = 3, .grad_norm = true};
  const pt::collective_program c = pt::place_collectives(p, ended);
  expect(pt::check_collectives(p, c, ended).ok(), "placed collectives with buckets and GRAD_NORM check", plan);
  check_mesh_step(plan, c, ended);
  // ZeRO-1 after the finite check and the norm: each stage's OPT_STEP on its shard, then PARAM_SYNC
  const pt::dp_options zero{.dp = 2, .grad_norm = true, .finite_check = true, .zero = 1};
  const pt::collective_program z = pt::place_collectives(p, zero);
  expect(pt::check_collectives(p, z, zero).ok(), "placed collectives with ZeRO-1 check", plan);
  check_mesh_step(plan, z, zero);
}

void check_memory(const pt::schedule_file& file, const pt::runtime_plan& plan) {
  const pt::program_view p = plan.compute();
  const pt::memory_sizes z{{1000}, {100}};
  if (pt::has_memory_actions(file)) {
    const pt::memory_program mem = pt::memory_actions_of(file, p);
    const pt::verdict v = pt::check_memory_actions(p, mem);
    if (!v.ok()) return expect_sentence(v, "refused memory actions have a sentence", plan);
    if (p.lanes > 1) return;
    const pt::mesh m{p.ranks, 1};
    const pt::dp_options o{.dp = 1};
    const pt::mesh_program mp = pt::lower_mesh(p, plan.lowered(), m, pt::place_collectives(p, o), o, mem);
    expect(pt::verify_mesh(mp).ok() && pt::verify_memory(p, mem, mp).ok(),
           "accepted memory actions lower to a step that proves", plan);
    const pt::schedule_file back = pt::read_schedule(pt::to_text(p, mem));
    expect(back.error.ok() && pt::memory_actions_of(back, p) == mem, "memory actions read back the same", plan);
    return;
  }
  if (p.lanes > 1 || pt::is_forward_only(p) || p.actions.size() > 4096) return;
  const std::vector<pt::rank_memory> base = pt::memory_of(p, pt::no_memory_actions(p), z);
  std::int64_t most = 0;
  for (const pt::rank_memory& r : base) most = std::max(most, r.peak_bytes);
  const pt::memory_options o{.offload = pt::memory_policy::automatic,
                             .recompute = pt::memory_policy::automatic,
                             .limit = most > 1000 ? most / 2 : 1000,
                             .copy_bandwidth = 100};
  const pt::memory_step s = pt::plan_memory(p, plan.lowered(), z, pt::costs{}, o);
  if (!s.result.ok()) return expect_sentence(s.result, "a refused memory step has a sentence", plan);
  expect(pt::check_memory_actions(p, s.actions).ok() && pt::verify_mesh(s.step).ok() &&
             pt::verify_memory(p, s.actions, s.step).ok(),
         "a placed memory step checks and proves", plan);
  for (const pt::rank_memory& r : s.memory) expect(r.peak_bytes <= o.limit, "a placed memory step is under its limit", plan);
  expect(pt::plan_memory(p, plan.lowered(), {{pt::limits::saved_bytes + 1}}, pt::costs{}, o).result.code ==
             pt::errc::too_large,
         "saved bytes past limits::saved_bytes are refused", plan);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > static_cast<std::size_t>(pt::limits::file_bytes)) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const pt::program prog = pt::parse_schedule(text);
  const pt::runtime_plan plan = pt::build_plan(prog);
  if (plan.ok())
    check_accepted(plan);
  else
    check_rejected(plan);
  if (plan.facts.result.ok() && plan.compute().has_edges()) check_graph(plan);
  check_dag_rules(prog);
  check_trainer_file(prog, plan);
  check_layout(text, plan);
  if (plan.ok() && plan.compute().actions.size() <= 20000) {  // (the mesh passes' cost, per input)
    const pt::schedule_file file = pt::read_schedule(text);
    check_collectives_of(file, plan);
    check_memory(file, plan);
  }
  return 0;
}
