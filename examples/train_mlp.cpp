// train_mlp — the main job: a small MLP trained across pipeline ranks on host threads.
//
//   train_mlp [--schedule NAME | --file SCHEDULE.txt] [--ranks P] [--microbatches M] [--chunks V]
//             [--mem-limit K] [--steps N] [--layers L] [--lr X] [--json]
//
// The model (examples/mlp.hpp) has L dense layers (default 8) split over the plan's stages
// (ranks × chunks; 2 per rank for the V-shape schedules), trained by SGD on synthetic data (a fresh batch per step from
// a fixed teacher). It prints the schedule's grid, the loss of every step, the measured step time next to the simulated
// makespan (the simulation's costs are the mean forward and backward times measured in the first step), and checks the
// first step's gradients against an unpipelined run of the same model: they must be bitwise equal. --json prints one
// object instead.
//
// Exit codes: 0 trained and matched the reference, 1 the gradients differ, 2 bad arguments or
// a rejected schedule.
#include <pipetype/host.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "mlp.hpp"
#include "plain_number.hpp"
#include "read_text.hpp"

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
};

constexpr const char* usage =
    "usage: train_mlp [--schedule NAME | --file SCHEDULE.txt] [--ranks P] [--microbatches M] [--chunks V]\n"
    "                 [--mem-limit K] [--steps N] [--layers L] [--lr X] [--json]\n"
    "NAME: gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, zb-h2, zb-v, dualpipe-v, dualpipe, zb-auto\n"
    "--mem-limit: zb-auto's memory limit in activations per rank, halves allowed (default: none)\n";

[[noreturn]] void fail(const std::string& msg) {
  std::cerr << "train_mlp: " << msg << "\n";
  std::exit(2);
}

int to_int(const std::string& flag, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (!examples::plain_number(v, false) || end != v.c_str() + v.size() || x < lo || x > hi)
    fail(flag + " needs a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
  return static_cast<int>(x);
}

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--help" || f == "-h") {
      std::cout << usage;
      std::exit(0);
    }
    if (f == "--json") {
      a.json = true;
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
      a.ranks = to_int(f, v, 1, 64);
    else if (f == "--microbatches")
      a.microbatches = to_int(f, v, 1, 4096);
    else if (f == "--chunks")
      a.chunks = to_int(f, v, 1, 16);
    else if (f == "--mem-limit") {
      char* end = nullptr;
      a.mem_limit = std::strtod(v.c_str(), &end);
      if (!examples::plain_number(v, true) || end != v.c_str() + v.size() || !(a.mem_limit >= 1) || a.mem_limit > 1e6 ||
          a.mem_limit * 2 != static_cast<double>(static_cast<long>(a.mem_limit * 2)))
        fail("--mem-limit needs a number of activations in [1, 1000000], in halves (e.g. 4 or 3.5)");
    } else if (f == "--steps")
      a.steps = to_int(f, v, 1, 100000);
    else if (f == "--layers")
      a.layers = to_int(f, v, 1, 256);
    else if (f == "--lr") {
      char* end = nullptr;
      a.lr = std::strtof(v.c_str(), &end);
      if (!examples::plain_number(v, true) || end != v.c_str() + v.size() || !(a.lr > 0) || a.lr > 10)
        fail("--lr needs a number in (0, 10]");
    } else
      fail("unknown argument '" + f + "'\n" + usage);
  }
  return a;
}

pt::runtime_plan make(args& a) {
  pt::program prog;
  if (!a.file.empty()) {
    std::string why;
    const std::optional<std::string> text = examples::read_text(a.file, why);
    if (!text) fail(why);
    prog = pt::parse_schedule(*text, "file");
    a.schedule = a.file;
  } else {
    const pt::schedule_info* info = pt::find_schedule(a.schedule);
    if (info) a.chunks = pt::default_chunks(*info, a.chunks);
    if (const char* e = pt::schedule_error(a.schedule, a.ranks, a.microbatches, a.chunks)) fail(e);
    try {
      prog = pt::make_schedule(a.schedule, a.ranks, a.microbatches, a.chunks, {.mem_limit = a.mem_limit});
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
  }
  pt::runtime_plan plan = pt::build_plan(std::move(prog));
  if (!plan.ok()) fail("the schedule was rejected: " + pt::explain(plan.result));
  a.ranks = plan.compute().ranks;
  a.microbatches = plan.compute().microbatches;
  a.chunks = plan.compute().lane_length() / std::max(1, plan.compute().ranks);
  return plan;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  args a = parse(argc, argv);
  const pt::runtime_plan plan = make(a);
  const int S = plan.compute().lane_length(), m = a.microbatches;  // the model's stages

  auto model = mlp::make_model(a.layers, S);
  auto reference = mlp::make_model(a.layers, S);  // the same initial parameters
  ph::executor ex{plan, model, {.deadline = std::chrono::seconds(60), .trace = true}};

  if (!a.json) {
    std::cout << pt::grid(plan, pt::simulate(plan, pt::costs{.f = 1, .b = 2})) << "\n"
              << "training: " << a.layers << " layers of width " << mlp::width << " over " << S << " stages, " << m
              << " microbatches of " << mlp::rows << " rows, " << a.steps << " steps, lr " << a.lr << "\n";
  }

  std::vector<double> losses, ref_losses, step_ms;
  double loss_first = 0, loss_last = 0, max_diff = 0, sim_ms = 0;
  bool match = false;
  for (int step = 0; step < a.steps; ++step) {
    const mlp::batch b = mlp::make_batch(m, static_cast<std::uint64_t>(step));
    mlp::attach(model, b, losses, m);
    const auto t0 = std::chrono::steady_clock::now();
    ex.step(b.inputs);
    step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    const double loss = mlp::mean_loss(losses);
    if (step == 0) {
      loss_first = loss;
      mlp::reference_step(reference, b, ref_losses, m);
      max_diff = mlp::max_grad_diff(model, reference, &match);
      match = match && mlp::mean_loss(ref_losses) == loss;
      // the simulation's costs: the mean F and B (I, W) times measured in this step
      double sum[pt::kind_count] = {}, n[pt::kind_count] = {};
      for (const ph::op_time& t : ex.trace())
        if (t.code == pt::op_code::compute) {
          sum[static_cast<int>(t.what)] += t.end - t.start;
          n[static_cast<int>(t.what)] += 1;
        }
      auto mean_ms = [&](pt::kind k, double fallback) {
        const int i = static_cast<int>(k);
        return n[i] > 0 ? 1e3 * sum[i] / n[i] : fallback;
      };
      const double f = mean_ms(pt::kind::F, 0), bw = mean_ms(pt::kind::B, 0);
      sim_ms =
          pt::simulate(plan, pt::costs{.f = f, .b = bw, .i = mean_ms(pt::kind::I, -1), .w = mean_ms(pt::kind::W, -1)})
              .makespan();
    }
    loss_last = loss;
    if (!a.json) std::printf("step %3d  loss %.6f  %7.3f ms\n", step, loss, step_ms.back());
    if (!std::isfinite(loss)) {
      std::fprintf(stderr, "train_mlp: step %d: the loss is not finite (%g); lower --lr (now %g)\n", step, loss,
                   static_cast<double>(a.lr));
      return 1;
    }
    // the stages hold the gradient summed over the m microbatches: step along its mean, so one
    // learning rate serves every microbatch count
    for (mlp::stage& s : model.stages()) s.sgd(a.lr / static_cast<float>(m));
  }
  const double measured = median(step_ms);

  if (a.json) {
    std::printf(
        "{\"schedule\": \"%s\", \"ranks\": %d, \"microbatches\": %d, \"chunks\": %d, \"steps\": %d, "
        "\"loss_first\": %.9g, \"loss_last\": %.9g, \"grads_match_reference\": %s, \"max_abs_grad_diff\": %.9g, "
        "\"step_ms_median\": %.6f, \"simulated_makespan_ms\": %.6f}\n",
        a.schedule.c_str(), a.ranks, m, a.chunks, a.steps, loss_first, loss_last, match ? "true" : "false", max_diff,
        measured, sim_ms);
  } else {
    std::printf("\nloss %.6f -> %.6f\n", loss_first, loss_last);
    std::printf("step time %.3f ms (median), simulated makespan %.3f ms (ratio %.2f; %d rank threads on %u cores)\n",
                measured, sim_ms, sim_ms > 0 ? measured / sim_ms : 0.0, 2 * a.ranks,
                std::thread::hardware_concurrency());
    std::printf("first step's gradients vs the unpipelined reference: %s (max |diff| %g)\n",
                match ? "bitwise equal" : "DIFFERENT", max_diff);
  }
  return match ? 0 : 1;
}
