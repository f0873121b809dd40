// train_graph — models whose stage graphs are not chains, trained across pipeline ranks on host
// threads (docs/10_stage_graphs.md).
//
//   train_graph [--graph skip|two-tower] [--schedule NAME | --file SCHEDULE.txt] [--ranks P]
//               [--microbatches M] [--steps N] [--lr X] [--json]
//
// The models (examples/graph_model.hpp): a skip connection (0 → 1 → 2 → 3 and 0 → 2) and two
// towers (0 → 2, 1 → 2, 2 → 3), four stages each, as `pipetype::dag` types, over 4 ranks (2 for
// the schedules with two stages per rank). The schedule (any built-in one, over the graph: docs/10;
// DualPipe runs a copy of the graph in each direction and needs 8 microbatches or more) is
// generated, verified, lowered and run by the host executor; every step is checked against an
// unpipelined run of the same model, which must give bitwise the same gradients. --json prints
// one object. --file runs a schedule file instead (its `edges` line must be the graph's, the same
// edges in the same order: anything else is refused with one sentence, exit 2).
//
// Exit codes: 0 trained and matched the reference, 1 the gradients differ, 2 bad arguments or a
// rejected schedule.
#include <pipetype/host.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.hpp"
#include "figures.hpp"
#include "graph_model.hpp"
#include "trainer_file.hpp"
#include "write_file.hpp"

namespace pt = pipetype;
namespace gm = graph_model;

namespace {

struct args {
  std::string graph = "skip", schedule = "1f1b", file;
  int ranks = 4, microbatches = 8, steps = 10;
  float lr = 0.5f;
  bool json = false;
};

constexpr const char* usage =
    "usage: train_graph [--graph skip|two-tower] [--schedule NAME | --file SCHEDULE.txt] [--ranks P]\n"
    "                   [--microbatches M] [--steps N] [--lr X] [--json]\n"
    "NAME: any built-in schedule (dualpipe: M >= 8); P: 4 for one stage per rank, 2 for interleaved-1f1b,\n"
    "      looped-bfs, zb-v and dualpipe-v (two stages per rank)\n"
    "--graph: the model's stage graph, a skip connection (0>1,1>2,2>3,0>2) or two towers (default skip)\n"
    "--file: a schedule in the text notation over that graph (an `edges` line; docs/10)\n"
    "--microbatches M (default 8); --steps N: training steps (default 10); --lr X: the learning rate\n"
    "           (default 0.5); --json: the run's figures as one JSON object\n";

constexpr examples::cli cli{"train_graph", usage};

[[noreturn]] void fail(const std::string& msg) { cli.fail(msg); }

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    cli.help(f);
    if (f == "--json") {
      a.json = true;
      continue;
    }
    if (i + 1 >= argc) fail(f.rfind("--", 0) == 0 ? f + " needs a value" : "unknown argument '" + f + "'");
    const std::string v = argv[++i];
    if (f == "--graph") {
      if (v != "skip" && v != "two-tower") fail("--graph is skip or two-tower, got '" + v + "'");
      a.graph = v;
    } else if (f == "--schedule")
      a.schedule = v;
    else if (f == "--file")
      a.file = v;
    else if (f == "--ranks")
      a.ranks = cli.whole(f, v, 1, 64);
    else if (f == "--microbatches")
      a.microbatches = cli.whole(f, v, 1, 4096);
    else if (f == "--steps")
      a.steps = cli.whole(f, v, 1, 100000);
    else if (f == "--lr") {
      a.lr = cli.rate(f, v, 10);
    } else
      fail("unknown argument '" + f + "'\n" + usage);
  }
  return a;
}

/// --schedule: the built-in schedule over the graph `g`, one or two stages per rank.
pt::program generate(const args& a, const pt::stage_dag& g) {
  const int S = g.stages;
  const pt::schedule_info* info = pt::find_schedule(a.schedule);
  if (!info) fail("no schedule named '" + a.schedule + "'\n" + usage);
  const int v = pt::default_chunks(*info);  // stages per rank
  if (a.ranks * v != S)
    fail("--ranks " + std::to_string(a.ranks) + ": the " + a.graph + " graph has " + std::to_string(S) +
         " stages and " + a.schedule + " holds " + std::to_string(v) + " per rank, so --ranks " +
         std::to_string(S / v));
  pt::schedule_params params;
  params.edges = g.edges;
  try {
    return pt::make_schedule(a.schedule, a.ranks, a.microbatches, v, params);
  } catch (const std::invalid_argument& e) {
    fail("--schedule " + a.schedule + ": " + e.what());
  }
}

/// --file: the file's program, held to the flags' caps (examples/trainer_file.hpp); its graph
/// against the model's is the executor's check.
pt::program read_file(args& a) {
  std::string why;
  std::optional<pt::program> read = examples::read_trainer_file(a.file, {64, 4096, 128}, /*graphs*/ true, why);
  if (!read) fail(why);
  pt::program prog = std::move(*read);
  a.schedule = a.file;
  a.ranks = prog.ranks;
  a.microbatches = prog.microbatches;
  return prog;
}

template <class M>
int train(args a) {
  const pt::stage_dag g = M::topology();
  pt::program prog = a.file.empty() ? generate(a, g) : read_file(a);
  const int S = g.stages, m = a.microbatches;
  const pt::runtime_plan plan = pt::build_plan(std::move(prog));
  if (!plan.ok()) fail("the schedule was rejected: " + pt::explain(plan.result));

  M model = gm::make<M>(11), reference = gm::make<M>(11);
  pt::host::executor ex{plan, model, {.deadline = std::chrono::seconds(60)}};
  int sources = 0;
  for (int s = 0; s < S; ++s) sources += pt::predecessors(g, s).empty() ? 1 : 0;

  if (!a.json) {
    std::cout << pt::grid(plan, pt::simulate(plan, pt::costs{.f = 1, .b = 2})) << "\n"
              << "training the " << a.graph << " graph (";
    for (std::size_t k = 0; k < g.edges.size(); ++k)
      std::cout << (k ? ", " : "") << g.edges[k].from << ">" << g.edges[k].to;
    std::cout << ") under " << a.schedule << ": " << m << " microbatches of " << gm::rows << " rows, " << a.steps
              << " steps\n";
  }
  std::vector<double> losses, ref_losses;
  double loss_first = 0, loss_last = 0, max_diff = 0;
  bool match = true;
  for (int step = 0; step < a.steps; ++step) {
    const gm::batch b = gm::make_batch(sources, m, static_cast<std::uint64_t>(step));
    gm::attach(model, b, losses, m);
    ex.step(b.inputs);
    gm::reference_step(reference, b, ref_losses, m);
    bool same = false;
    max_diff = std::fmax(max_diff, gm::max_grad_diff(model, reference, &same));
    match = match && same && losses == ref_losses;
    double loss = 0;
    for (const double l : losses) loss += l / m;
    if (step == 0) loss_first = loss;
    loss_last = loss;
    if (!a.json) std::printf("step %3d  loss %.6f%s\n", step, loss, same ? "" : "  (gradients differ)");
    if (!std::isfinite(loss)) {
      std::fprintf(stderr, "train_graph: step %d: the loss is not finite; lower --lr\n", step);
      return 1;
    }
    for (gm::node* n : gm::nodes_of(model)) n->sgd(a.lr / static_cast<float>(m));
    for (gm::node* n : gm::nodes_of(reference)) n->sgd(a.lr / static_cast<float>(m));
  }
  std::size_t sends = 0, lists = plan.lowered().slot_lists.size();
  for (const pt::lowered_op& o : plan.ops()) sends += o.code == pt::op_code::send ? 1 : 0;
  if (a.json) {
    std::printf(
        "{\"graph\": \"%s\", \"schedule\": %s, \"ranks\": %d, \"microbatches\": %d, \"steps\": %d, \"edges\": %zu, "
        "\"loss_first\": %s, \"loss_last\": %s, \"grads_match_reference\": %s, \"max_abs_grad_diff\": %s, "
        "\"lowered\": {\"ops\": %zu, \"sends\": %zu, \"communicators\": %zu, \"slot_list_entries\": %zu}}\n",
        a.graph.c_str(), pt::detail::json_quote(a.schedule).c_str(), a.ranks, m, a.steps, g.edges.size(),
        examples::json_number(loss_first).c_str(), examples::json_number(loss_last).c_str(), match ? "true" : "false",
        examples::json_number(max_diff).c_str(), plan.ops().size(), sends, plan.comms().size(), lists);
  } else {
    std::printf("\nloss %.6f -> %.6f\n", loss_first, loss_last);
    std::printf("every step's gradients vs the unpipelined reference: %s (max |diff| %g)\n",
                match ? "bitwise equal" : "DIFFERENT", max_diff);
  }
  return match ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  examples::tool_exits("train_graph");
  const args a = parse(argc, argv);
  // a model the plan does not fit (pipetype::shape_error from the executor's checks) or a step
  // that fails: one sentence and exit 2, never an uncaught exception
  try {
    return a.graph == "skip" ? train<gm::skip>(a) : train<gm::two_tower>(a);
  } catch (const std::exception& e) {
    fail(e.what());
  }
}
