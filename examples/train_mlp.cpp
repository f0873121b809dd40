// train_mlp — the main job: a small MLP trained across pipeline ranks on host threads.
//
//   train_mlp [--schedule NAME | --file SCHEDULE.txt] [--ranks P] [--microbatches M] [--chunks V]
//             [--mem-limit K] [--steps N] [--layers L] [--lr X] [--calibrate]
//             [--layer-us U] [--slow RANK:FACTOR [--plan-set]] [--svg FILE] [--trace FILE] [--json]
//
// The model (examples/mlp.hpp) has L dense layers (default 8) split over the plan's stages
// (ranks × chunks; 2 per rank for the V-shape schedules), trained by SGD on synthetic data (a fresh batch per step from
// a fixed teacher). It prints the schedule's grid, the loss of every step, the measured step time next to the simulated
// makespan (the simulation's costs are those measured in the last step), and checks the
// first step's gradients against an unpipelined run of the same model: they must be bitwise equal. --json prints one
// object instead. The simulation's costs come from the last step's trace (pipetype::measure_costs: per stage and
// kind the median time, and the transfer latency).
//
// --svg FILE draws the last step as measured (the host executor's trace) above its simulation under the costs
// measured in that step, on one time scale (io/svg.hpp); --trace FILE writes both as one Chrome trace for Perfetto
// (io/chrome_trace.hpp): processes "measured rank r" and "simulated rank r". Both are written atomically.
// --calibrate (zb-auto only): before training, runs 5 steps that do not train on the plan zb-auto builds for the
// default costs, measures their costs, rebuilds zb-auto for the measured ones and trains on that plan; it prints the
// step time and the simulated figures of both plans.
// --layer-us U gives every layer a pretend cost: each call of a stage lasts at least U µs per layer
// it holds (its forward, its backward-for-inputs and its backward-for-weights each; the layers'
// arithmetic is a few microseconds), so that the step's shape is the schedule's, not the host's.
// --slow RANK:FACTOR makes every stage the plan puts on rank RANK take FACTOR times as long (it
// sleeps the rest of each call: a throttled device); --json adds stragglers (the median step,
// fixed_step_ms). With --plan-set (a --schedule of one stage per rank, at least one layer a rank)
// it holds a plan for each rank slowed by FACTOR, layers moved off it (schedules/plan_set.hpp),
// each with its own model and executor, bound once. The first half of the steps run the nominal
// plan (a fixed plan); from then on the detector reads each rank's speed from the traces (its
// median over the last 3 steps: host/stragglers.hpp), the set's rule picks the next step's plan,
// and the layers move to its split between two steps (docs/05 §5.9). A layer's arithmetic does
// not depend on the stage that holds it, so the losses are a fixed plan's, bit for bit. --json
// adds stragglers.fixed_step_ms, switched_step_ms, switched_at, chosen, switch_ms and the
// modelled makespans; --svg / --trace draw the last step under the fixed plan above the last
// under the chosen one, both measured.
//
// Exit codes: 0 trained and matched the reference, 1 the gradients differ, 2 bad arguments or
// a rejected schedule.
#include <pipetype/host.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "figures.hpp"
#include "mlp.hpp"
#include "plan_set_run.hpp"
#include "trainer_file.hpp"
#include "write_file.hpp"

namespace pt = pipetype;
namespace ph = pipetype::host;

namespace {

struct args {
  std::string schedule = "1f1b";
  std::string file;
  int ranks = 4, microbatches = 8, chunks = 0, steps = 20, layers = 8;
  double mem_limit = 0;  // zb-auto's limit, in microbatch activations per rank
  float lr = 4.0f;       // on the mean gradient over microbatches (the step divides the summed one by m)
  bool json = false;
  bool calibrate = false;
  double layer_us = 0;               // --layer-us: each call lasts at least this per layer it holds
  std::optional<pt::slowdown> slow;  // --slow RANK:FACTOR
  bool plan_set = false;             // --plan-set: a plan per slowed rank, switched between steps
  std::string svg, trace;
};

constexpr const char* usage =
    "usage: train_mlp [--schedule NAME | --file SCHEDULE.txt] [--ranks P] [--microbatches M] [--chunks V]\n"
    "                 [--mem-limit K] [--steps N] [--layers L] [--lr X] [--calibrate]\n"
    "                 [--layer-us U] [--slow RANK:FACTOR [--plan-set]] [--svg FILE] [--trace FILE] [--json]\n"
    "NAME: gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, zb-h2, zb-v, v-min, v-half, dualpipe-v, dualpipe, "
    "zb-auto\n"
    "--file: a schedule in the text notation instead (docs/02; its sizes from the file)\n"
    "--ranks, --microbatches, --chunks: the plan's sizes (defaults 4, 8, and the schedule's own chunks)\n"
    "--steps N: training steps (default 20); --layers L: the MLP's dense layers, split over the stages\n"
    "           (default 8); --lr X: the learning rate on the mean gradient (default 4)\n"
    "--mem-limit: zb-auto's memory limit in activations per rank, halves allowed (default: none)\n"
    "--calibrate: zb-auto rebuilt from the costs measured on this machine before training\n"
    "--layer-us U: each stage's call lasts at least U microseconds per layer it holds (a pretend cost)\n"
    "--slow R:F: the stages on rank R take F times as long (they sleep the rest), a throttled device;\n"
    "           the layers' own arithmetic takes microseconds: give --layer-us too\n"
    "--plan-set: with --slow, a plan for each rank slowed F times (layers moved off it); the first half of\n"
    "            the steps run the nominal plan, then the plan the measured speeds choose\n"
    "--svg, --trace: the last step, measured and simulated, as an SVG timeline / a Chrome trace (with\n"
    "                --plan-set: the fixed plan's last step and the chosen plan's, both measured)\n"
    "--json: the run's figures as one JSON object\n";

constexpr examples::cli cli{"train_mlp", usage};

// The caps of --ranks, --microbatches and --chunks; a --file keeps within them too.
constexpr int max_ranks = 64, max_microbatches = 4096, max_chunks = 16;

[[noreturn]] void fail(const std::string& msg) { cli.fail(msg); }

/// The longest a stage's call may last under --layer-us and --slow, in µs (every layer on one stage).
double longest_call_us(const args& a) { return a.layer_us * a.layers * (a.slow ? std::max(1.0, a.slow->factor) : 1.0); }

/// The executor's deadline for one wait: a minute, plus three times a step of the longest calls (a
/// wait may span a pipeline's fill of another rank's calls).
std::chrono::milliseconds deadline(const args& a) {
  return std::chrono::milliseconds(
      60000 + static_cast<long long>(3 * longest_call_us(a) * 3 * (a.microbatches + a.ranks) / 1000));
}

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    cli.help(f);
    if (f == "--json" || f == "--calibrate" || f == "--plan-set") {
      (f == "--json" ? a.json : f == "--calibrate" ? a.calibrate : a.plan_set) = true;
      continue;
    }
    if (i + 1 >= argc)
      fail(f == "--schedule" || f == "--file" || f.rfind("--", 0) == 0 ? f + " needs a value"
                                                                       : "unknown argument '" + f + "'");
    const std::string v = argv[++i];
    if (f == "--schedule")
      a.schedule = v;
    else if (f == "--file")
      a.file = v;
    else if (f == "--ranks")
      a.ranks = cli.whole(f, v, 1, max_ranks);
    else if (f == "--microbatches")
      a.microbatches = cli.whole(f, v, 1, max_microbatches);
    else if (f == "--chunks")
      a.chunks = cli.whole(f, v, 1, max_chunks);
    else if (f == "--mem-limit") {
      char* end = nullptr;
      a.mem_limit = std::strtod(v.c_str(), &end);
      if (!examples::plain_number(v, true) || end != v.c_str() + v.size() || !(a.mem_limit >= 1) || a.mem_limit > 1e6 ||
          a.mem_limit * 2 != static_cast<double>(static_cast<long>(a.mem_limit * 2)))
        fail("--mem-limit needs a number of activations in [1, 1000000], in halves (e.g. 4 or 3.5)");
    } else if (f == "--steps")
      a.steps = cli.whole(f, v, 1, 100000);
    else if (f == "--layers")
      a.layers = cli.whole(f, v, 1, 256);
    else if (f == "--lr") {
      a.lr = cli.rate(f, v, 10);
    } else if (f == "--layer-us")
      a.layer_us = cli.rate(f, v, 1000000);
    else if (f == "--slow") {
      const auto [rank, factor] = cli.rank_factor(f, v, max_ranks - 1, a.slow.has_value());
      a.slow = pt::slowdown{rank, factor};
    } else if (f == "--svg" || f == "--trace") {
      if (v.empty()) fail(f + " needs a file name");
      (f == "--svg" ? a.svg : a.trace) = v;
    } else
      fail("unknown argument '" + f + "'\n" + usage);
  }
  if (a.calibrate && (a.schedule != "zb-auto" || !a.file.empty()))
    fail("--calibrate rebuilds zb-auto from measured costs; " +
         (a.file.empty() ? "--schedule " + a.schedule : "--file " + a.file) + " does not depend on costs");
  if (a.plan_set && !a.slow) fail("--plan-set holds plans for slowed ranks: give --slow RANK:FACTOR too");
  if (a.plan_set)
    if (const char* e = examples::plan_set_run::steps_error(a.steps)) fail(e);
  if (const double call_us = longest_call_us(a); call_us > 1e7)
    fail("--layer-us, --layers" + std::string(a.slow ? " and --slow's factor" : "") + " make a call last up to " +
         examples::json_number(call_us / 1e6) + " s: keep U × L" + (a.slow ? " × F" : "") + " within 10 s");
  if (a.plan_set && !a.file.empty()) fail("--plan-set builds its plans from a --schedule NAME: not with --file");
  if (a.plan_set && a.calibrate)
    fail(
        "--plan-set models a layer as F = 1, B = 2 and moves layers by it, not by measured costs: not with "
        "--calibrate");
  return a;
}

pt::runtime_plan make(args& a, const pt::costs& c = {}) {
  pt::program prog;
  if (!a.file.empty()) {
    // a chain of at most the flags' sizes: an `edges` line is train_graph's (examples/trainer_file.hpp)
    std::string why;
    std::optional<pt::program> read = examples::read_trainer_file(
        a.file, {max_ranks, max_microbatches, 2 * max_ranks * max_chunks}, /*graphs*/ false, why);
    if (!read) fail(why);
    prog = std::move(*read);
    a.schedule = a.file;
  } else {
    const pt::schedule_info* info = pt::find_schedule(a.schedule);
    if (info) a.chunks = pt::default_chunks(*info, a.chunks);
    if (const char* e = pt::schedule_error(a.schedule, a.ranks, a.microbatches, a.chunks)) fail(e);
    if (info->local)
      fail("--schedule " + a.schedule +
           " trains every stage on a loss of its own (local learning), and this MLP has one loss, on its last stage");
    try {
      prog = pt::make_schedule(a.schedule, a.ranks, a.microbatches, a.chunks, {c, a.mem_limit});
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
  }
  pt::runtime_plan plan = pt::build_plan(std::move(prog));
  if (!plan.ok()) fail("the schedule was rejected: " + pt::explain(plan.result));
  a.ranks = plan.compute().ranks;
  a.microbatches = plan.compute().microbatches;
  a.chunks = plan.compute().lane_length() / std::max(1, plan.compute().ranks);
  if (a.slow)
    if (const char* e = pt::slowdown_error(*a.slow, a.ranks))
      fail("--slow: " + std::string(e) + examples::cli::rank_range(a.slow->rank, a.ranks));
  return plan;
}

/// --layer-us and --slow: each stage's pace (the slowed factor on the stages `plan` puts on the slow rank).
void pace(pt::uniform_chain<mlp::stage>& model, const pt::runtime_plan& plan, const args& a) {
  const pt::program_view pv = plan.compute();
  if (a.slow && pv.lanes > 1)
    fail("--slow with " + a.schedule + ": its stages run on two ranks each (two lanes), and a stage is slowed whole");
  const auto per_layer = std::chrono::nanoseconds(static_cast<long>(a.layer_us * 1000));
  for (int s = 0; s < model.size(); ++s)
    model.stage(s).set_pace(a.slow && pv.stage_rank[static_cast<std::size_t>(s)] == a.slow->rank ? a.slow->factor : 1,
                            per_layer);
}

using examples::median;
using examples::since_ms;

/// The simulated step of `plan` under `c` as drawable events.
pt::step_trace simulated(const pt::runtime_plan& plan, const pt::cost_model& c) {
  pt::trace_options o;
  o.unit = "ms";
  return pt::trace_of(plan.compute(), pt::simulate(plan.compute(), c), c, o);
}

/// --calibrate: `calib` steps that do not train on `plan`; their median time and the costs of the last.
struct calibration {
  double step_ms = 0;
  pt::cost_model costs;
};

calibration measure(const args& a, const pt::runtime_plan& plan, pt::uniform_chain<mlp::stage>& model, int steps) {
  const int m = a.microbatches;
  ph::executor ex{plan, model, {.deadline = deadline(a), .trace = true}};
  std::vector<double> losses, ms;
  for (int k = 0; k < steps; ++k) {
    const mlp::batch b = mlp::make_batch(m, 1000003 + static_cast<std::uint64_t>(k));
    mlp::attach(model, b, losses, m);
    const auto t0 = std::chrono::steady_clock::now();
    ex.step(b.inputs);
    ms.push_back(since_ms(t0));
    for (mlp::stage& s : model.stages()) s.zero_grads();
  }
  pt::trace_options o;
  o.ranks = plan.compute().ranks;
  return {median(ms), pt::measure_costs(pt::trace_of(ex.trace(), o))};
}

/// The first fields of --json's object (left open).
void print_json_head(const args& a, double loss_first, double loss_last, bool match, double max_diff, double step_ms,
                     double simulated_ms) {
  std::printf(
      "{\"schedule\": %s, \"ranks\": %d, \"microbatches\": %d, \"chunks\": %d, \"steps\": %d, "
      "\"loss_first\": %s, \"loss_last\": %s, \"grads_match_reference\": %s, \"max_abs_grad_diff\": %s, "
      "\"step_ms_median\": %.6f, \"simulated_makespan_ms\": %.6f",
      pt::detail::json_quote(a.schedule).c_str(), a.ranks, a.microbatches, a.chunks, a.steps,
      examples::json_number(loss_first).c_str(), examples::json_number(loss_last).c_str(), match ? "true" : "false",
      examples::json_number(max_diff).c_str(), step_ms, simulated_ms);
}

/// --svg and --trace: two measured or simulated steps, one above the other.
void draw(const args& a, const pt::step_trace& top, const std::string& top_title, const pt::step_trace& bottom,
          const std::string& bottom_title) {
  pt::svg_options o;
  o.transfers = top.transfers.size() + bottom.transfers.size() <= 256;
  o.title = a.schedule;
  std::string why;
  if (!a.svg.empty() && !examples::write_file(a.svg, pt::svg({{&top, top_title}, {&bottom, bottom_title}}, o), why))
    fail(why);
  if (!a.trace.empty() &&
      !examples::write_file(a.trace,
                            pt::chrome_trace({{&top, top_title.substr(0, top_title.find(' ')), 1000},
                                              {&bottom, bottom_title.substr(0, bottom_title.find(' ')), 1000}}),
                            why))
    fail(why);
}

std::string costs_text(const pt::costs& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "F=%.4f B=%.4f I=%.4f W=%.4f comm=%.4f ms", c.f, c.b, c.of(pt::kind::I),
                c.of(pt::kind::W), c.comm);
  return buf;
}

/// A loss that is not finite: says so (and which step) and returns true.
bool diverged(const args& a, int step, double loss) {
  if (std::isfinite(loss)) return false;
  std::fprintf(stderr, "train_mlp: step %d: the loss is not finite (%g); lower --lr (now %g)\n", step, loss,
               static_cast<double>(a.lr));
  return true;
}

/// --plan-set (the header comment): the nominal plan and one per rank slowed by --slow's factor,
/// each with its own model (its split of the layers) and executor, bound once; the nominal plan
/// for the first half of the steps, then the plan the detector's measured speeds choose.
int train_plan_set(args& a, const pt::runtime_plan& nominal) {
  const pt::program_view pv = nominal.compute();
  if (pv.lanes > 1 || pv.stages != pv.ranks)
    fail("--plan-set moves layers between one stage per rank: " + a.schedule + " holds " +
         std::to_string(pv.stages / pv.ranks) + " stages a rank");
  const int S = pv.stages, m = pv.microbatches;
  if (a.layers < S)
    fail("--plan-set keeps at least one layer on every rank: give --layers " + std::to_string(S) + " or more");
  // the model's layout: the layers even, each a decoder layer of the cost model (the loss is a few additions)
  pt::layer_layout layout;
  for (const int n : mlp::even_split(a.layers, S)) layout.stages.push_back({0, n, 0, 0});
  std::vector<pt::slowdown> scenarios;
  for (int r = 0; r < S; ++r) scenarios.push_back({r, a.slow->factor});
  pt::plan_set set;
  try {
    set = pt::make_plan_set(a.schedule, S, m, layout, pt::costs{.f = 1, .b = 2}, scenarios,
                            pt::schedule_params{.mem_limit = a.mem_limit}, 1);
  } catch (const std::invalid_argument& e) {
    fail(std::string("--plan-set: ") + e.what());
  }
  std::vector<pt::runtime_plan> plans;
  std::deque<pt::uniform_chain<mlp::stage>> models;  // (executors hold their addresses)
  std::vector<std::unique_ptr<ph::executor<pt::uniform_chain<mlp::stage>>>> exs;
  for (const pt::scenario_plan& sp : set.plans) {
    std::vector<int> split;
    for (const pt::stage_layers& x : sp.layout.stages) split.push_back(x.decoder);
    plans.push_back(pt::build_plan(sp.prog));
    if (!plans.back().ok()) fail("--plan-set: a plan was rejected: " + pt::explain(plans.back().result));
    models.push_back(mlp::make_model(split));
    pace(models.back(), plans.back(), a);
    exs.push_back(std::make_unique<ph::executor<pt::uniform_chain<mlp::stage>>>(
        plans.back(), models.back(), ph::executor_options{.deadline = deadline(a), .trace = true}));
  }
  auto reference = mlp::make_model(a.layers, S);  // the nominal model's initial parameters
  examples::plan_set_run run{set, plans, *a.slow, a.steps};

  std::vector<double> losses, ref_losses;
  double loss_first = 0, loss_last = 0, max_diff = 0;
  bool match = false;
  for (int step = 0; step < a.steps; ++step) {
    const mlp::batch b = mlp::make_batch(m, static_cast<std::uint64_t>(step));
    const std::size_t k = run.current();
    mlp::attach(models[k], b, losses, m);
    const auto t0 = std::chrono::steady_clock::now();
    exs[k]->step(b.inputs);
    const double ms = since_ms(t0);
    loss_last = mlp::mean_loss(losses);
    if (step == 0) {
      loss_first = loss_last;
      mlp::reference_step(reference, b, ref_losses, m);
      max_diff = mlp::max_grad_diff(models[k], reference, &match);
      match = match && mlp::mean_loss(ref_losses) == loss_last;
    }
    if (!a.json) std::printf("step %3d  plan %zu  loss %.6f  %7.3f ms\n", step, k, loss_last, ms);
    if (diverged(a, step, loss_last)) return 1;
    for (mlp::stage& st : models[k].stages()) st.sgd(a.lr / static_cast<float>(m));
    run.after(step + 1, ms, exs[k]->trace(), [&](std::size_t from, std::size_t to) {
      mlp::move_layers(models[from], models[to]);  // between two steps
    });
  }
  const std::size_t last = run.current();
  pt::trace_options o;
  o.ranks = S;
  const pt::step_trace last_trace = pt::trace_of(exs[last]->trace(), o);
  // the plan run last, simulated with the costs measured in its last step
  const double sim_ms = simulated(plans[last], pt::measure_costs(last_trace)).makespan();

  // --svg / --trace: the last step under the fixed plan above the last under the chosen one, measured
  if (!a.svg.empty() || !a.trace.empty()) {
    char slow[64];
    std::snprintf(slow, sizeof slow, "rank %d %g× as slow", a.slow->rank, a.slow->factor);
    draw(a, pt::trace_of(exs[0]->trace(), o), std::string("fixed: the nominal plan's last step, ") + slow, last_trace,
         run.switched() ? "switched: plan " + std::to_string(last) + "'s last step (layers moved off rank " +
                              std::to_string(last - 1) + ")"
                        : std::string("chosen: the nominal plan kept (the same step)"));
  }
  if (a.json) {
    print_json_head(a, loss_first, loss_last, match, max_diff,
                    run.switched() ? run.switched_step_ms() : run.fixed_step_ms(), sim_ms);
    run.print_json();
    std::printf("}\n");
  } else {
    std::printf("\nloss %.6f -> %.6f; ", loss_first, loss_last);
    run.print_text();
    std::printf("first step's gradients vs the unpipelined reference: %s (max |diff| %g)\n",
                match ? "bitwise equal" : "DIFFERENT", max_diff);
  }
  return match ? 0 : 1;
}

}  // namespace

int train(int argc, char** argv) {
  args a = parse(argc, argv);
  pt::runtime_plan plan = make(a);
  if (a.plan_set) return train_plan_set(a, plan);
  const int S = plan.compute().lane_length(), m = a.microbatches;  // the model's stages

  auto model = mlp::make_model(a.layers, S);
  auto reference = mlp::make_model(a.layers, S);  // the same initial parameters
  pace(model, plan, a);

  // --calibrate: zb-auto for the default costs, measured here, then rebuilt for the measured costs
  struct {
    double step_ms_before = 0, simulated_before = 0, simulated_after = 0;
    bool kept = false;
    pt::costs costs{};
  } cal;
  if (a.calibrate) {
    const calibration c = measure(a, plan, model, 5);
    cal.step_ms_before = c.step_ms;
    cal.costs = c.costs.base();
    cal.simulated_before = pt::simulate(plan.compute(), c.costs).makespan();
    // zb-auto searches under the measured per-kind costs; keep its plan only if it simulates
    // shorter under everything measured (per-stage costs included), which its search does not see
    pt::runtime_plan tuned = make(a, cal.costs);
    cal.simulated_after = pt::simulate(tuned.compute(), c.costs).makespan();
    cal.kept = cal.simulated_after < cal.simulated_before;
    if (cal.kept) plan = std::move(tuned);
  }
  pace(model, plan, a);
  ph::executor ex{plan, model, {.deadline = deadline(a), .trace = true}};

  if (!a.json) {
    std::cout << pt::grid(plan, pt::simulate(plan, pt::costs{.f = 1, .b = 2})) << "\n"
              << "training: " << a.layers << " layers of width " << mlp::width << " over " << S << " stages, " << m
              << " microbatches of " << mlp::rows << " rows, " << a.steps << " steps, lr " << a.lr << "\n";
  }

  std::vector<double> losses, ref_losses, step_ms;
  double loss_first = 0, loss_last = 0, max_diff = 0;
  bool match = false;
  for (int step = 0; step < a.steps; ++step) {
    const mlp::batch b = mlp::make_batch(m, static_cast<std::uint64_t>(step));
    mlp::attach(model, b, losses, m);
    const auto t0 = std::chrono::steady_clock::now();
    ex.step(b.inputs);
    step_ms.push_back(since_ms(t0));
    const double loss = mlp::mean_loss(losses);
    if (step == 0) {
      loss_first = loss;
      mlp::reference_step(reference, b, ref_losses, m);
      max_diff = mlp::max_grad_diff(model, reference, &match);
      match = match && mlp::mean_loss(ref_losses) == loss;
    }
    loss_last = loss;
    if (!a.json) std::printf("step %3d  loss %.6f  %7.3f ms\n", step, loss, step_ms.back());
    if (diverged(a, step, loss)) return 1;
    // the stages hold the gradient summed over the m microbatches: step along its mean, so one
    // learning rate serves every microbatch count
    for (mlp::stage& s : model.stages()) s.sgd(a.lr / static_cast<float>(m));
  }
  const double measured = median(step_ms);
  // the simulation's costs: per stage and kind the median time measured in the last step
  pt::trace_options measured_options;
  measured_options.ranks = plan.compute().ranks;
  const pt::step_trace real = pt::trace_of(ex.trace(), measured_options);
  const pt::cost_model measured_costs = pt::measure_costs(real);
  const pt::step_trace sim = simulated(plan, measured_costs);
  const double sim_ms = sim.makespan();

  // --svg / --trace: the last step as measured, above its simulation under that step's costs
  if (!a.svg.empty() || !a.trace.empty()) {
    const std::string last = "step " + std::to_string(a.steps - 1);
    draw(a, real, "measured " + last + " (host executor)", sim, "simulated with the costs measured in " + last);
  }

  if (a.json) {
    print_json_head(a, loss_first, loss_last, match, max_diff, measured, sim_ms);
    const pt::lowered_view low = plan.lowered();
    const auto count = [&](pt::op_code c) {
      return std::count_if(low.ops.begin(), low.ops.end(), [c](const pt::lowered_op& o) { return o.code == c; });
    };
    std::printf(", \"lowered\": {\"computes\": %td, \"sends\": %td, \"groups\": %td}", count(pt::op_code::compute),
                count(pt::op_code::send), count(pt::op_code::group));
    if (a.calibrate)
      std::printf(
          ", \"calibration\": {\"costs_ms\": {\"f\": %.6f, \"b\": %.6f, \"i\": %.6f, \"w\": %.6f, \"comm\": %.6f}, "
          "\"step_ms_before\": %.6f, \"step_ms_after\": %.6f, \"simulated_ms_before\": %.6f, "
          "\"simulated_ms_after\": %.6f, \"kept_calibrated\": %s}",
          cal.costs.f, cal.costs.b, cal.costs.of(pt::kind::I), cal.costs.of(pt::kind::W), cal.costs.comm,
          cal.step_ms_before, measured, cal.simulated_before, cal.simulated_after, cal.kept ? "true" : "false");
    if (a.slow)
      std::printf(", \"stragglers\": {\"slow_rank\": %d, \"factor\": %g, \"fixed_step_ms\": %.6f}", a.slow->rank,
                  a.slow->factor, measured);
    std::printf("}\n");
  } else {
    std::printf("\nloss %.6f -> %.6f\n", loss_first, loss_last);
    std::printf("step time %.3f ms (median), simulated makespan %.3f ms (ratio %.2f; %d rank threads on %u cores)\n",
                measured, sim_ms, sim_ms > 0 ? measured / sim_ms : 0.0, 2 * a.ranks,
                std::thread::hardware_concurrency());
    if (a.calibrate)
      std::printf(
          "calibration: measured costs %s\n"
          "  zb-auto for the default costs:  step %.3f ms, simulated %.3f ms\n"
          "  zb-auto for the measured costs: simulated %.3f ms (%+.1f%%): %s\n"
          "  trained on it: step %.3f ms (median)\n",
          costs_text(cal.costs).c_str(), cal.step_ms_before, cal.simulated_before, cal.simulated_after,
          cal.simulated_before > 0 ? 100 * (cal.simulated_after / cal.simulated_before - 1) : 0.0,
          cal.kept ? "kept" : "not shorter, the first plan kept", measured);
    if (a.slow)
      std::printf("rank %d runs %g× as long: the step above is the fixed plan's under it\n", a.slow->rank,
                  a.slow->factor);
    std::printf("first step's gradients vs the unpipelined reference: %s (max |diff| %g)\n",
                match ? "bitwise equal" : "DIFFERENT", max_diff);
  }
  return match ? 0 : 1;
}

int main(int argc, char** argv) {
  examples::tool_exits("train_mlp");
  // a model the plan does not fit (pipetype::shape_error from the executor's checks) or a step
  // that fails: one sentence and exit 2, never an uncaught exception
  try {
    return train(argc, argv);
  } catch (const std::exception& e) {
    fail(e.what());
  }
}
