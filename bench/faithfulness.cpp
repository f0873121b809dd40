// Does the host executor realise the schedule the simulator predicts? Stages sleep for fixed
// times (F = 2 ms, B = 4 ms by default, I = W = B/2 for the schedules that split backwards), so
// the step's length is set by the schedule, not by the machine's cores; the measured step time
// (median of --steps) is printed next to the simulated makespan of the same plan under the same
// costs, and their ratio. Every stage sleeps the same, whatever its placement (a V-shape chunk
// as long as a whole stage); an overlapped F&B pair runs its halves one after the other, as the
// simulator's default pair cost F + B assumes.
//
//   bash bench/faithfulness.sh            (builds release; every built-in schedule at p=4 m=8)
//   ./build/release/bench/bench_faithfulness [--ranks 4] [--microbatches 8] [--steps 7] [--f 2] [--b 4]
//   ./build/release/bench/bench_faithfulness --lengths FILE --token-cap N [--attention-at T] [--ranks 4]
//                                            [--groups auto|tick|peer]
//
// With --lengths (one sequence length per line) the step's sequences are packed as
// schedules/balance.hpp does, in arrival order and balanced, for 1F1B, ZB-H1 and zb-auto: each
// microbatch's stages sleep F and B times its scale (its cost over one sequence of N tokens, t +
// t²/T each: --attention-at T, N by default), and each packing's measured step is printed next to
// its simulated makespan, with the measured ratio balanced / arrival.
//
// Sleeping is done to an absolute deadline with the thread's timer slack lowered (Linux), so
// each action's length is its cost plus the kernel's wake-up latency (tens of microseconds).
#include <pipetype/host.hpp>
#include <pipetype/schedules/balance.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../examples/lengths_file.hpp"
#include "../examples/pace.hpp"

namespace pt = pipetype;
namespace ph = pipetype::host;

namespace {

struct sleeper {
  using input = pt::tensor<float, 64>;
  using output = pt::tensor<float, 64>;
  using weight_grad = pt::tensor<float, 1>;  // DualPipe needs pipetype to add gradients
  std::chrono::microseconds f{2000}, b{4000};
  const std::vector<double>* scale = nullptr;  // per microbatch (--lengths): its times' factor
  float grad[1] = {0};
  static void hold(std::chrono::microseconds d) { examples::hold(d); }
  std::chrono::microseconds of(std::chrono::microseconds d, int microbatch) const {
    return scale ? std::chrono::microseconds(static_cast<long>(static_cast<double>(d.count()) *
                                                               (*scale)[static_cast<std::size_t>(microbatch)]))
                 : d;
  }
  void forward(const pt::forward_ctx<sleeper>& c) { hold(of(f, c.microbatch)); }
  void backward(const pt::backward_ctx<sleeper>& c) { hold(of(b, c.microbatch)); }
  void backward_input(const pt::backward_ctx<sleeper>& c) { hold(of(b / 2, c.microbatch)); }
  void backward_weight(const pt::backward_ctx<sleeper>& c) { hold(of(b / 2, c.microbatch)); }
  std::span<float> weight_gradients() { return grad; }
};

struct row {
  std::string name;
  double measured_ms, simulated_ms;
};

/// `prog`'s measured step (stages sleeping, microbatch j's times × scale[j] when given) and its
/// simulated makespan under the same costs.
row run_program(std::string label, pt::program prog, int steps, double f_ms, double b_ms, pt::group_policy groups,
                const std::vector<double>* scale = nullptr) {
  const int m = prog.microbatches;
  const bool local = prog.view().has_detached();  // local-1f1b: its model's edges are detached too
  const pt::runtime_plan plan = pt::build_plan(std::move(prog), {.groups = groups});
  if (!plan.ok()) {
    std::fprintf(stderr, "%s: %s\n", label.c_str(), pt::describe(plan.result).c_str());
    std::exit(2);
  }
  std::vector<sleeper> stages(static_cast<std::size_t>(plan.compute().lane_length()));
  for (sleeper& s : stages) {
    s.f = std::chrono::microseconds(static_cast<long>(f_ms * 1000));
    s.b = std::chrono::microseconds(static_cast<long>(b_ms * 1000));
    s.scale = scale;
  }
  pt::uniform_chain<sleeper> model = local ? pt::uniform_chain<sleeper>(std::move(stages), pt::local_learning)
                                           : pt::uniform_chain<sleeper>(std::move(stages));
  ph::executor ex{plan, model, {.ordered_gradients = false}};  // a sleeper's gradient is one float
  std::vector<float> batch(64 * static_cast<std::size_t>(m));
  ex.step(batch);  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ex.step(batch);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double sim = pt::scaled_makespan(plan.compute(), pt::cost_model{pt::costs{.f = f_ms, .b = b_ms}}, {},
                                         scale ? *scale : std::vector<double>{});
  return {std::move(label), ms[ms.size() / 2], sim};
}

row run(const char* name, int p, int m, int v, int steps, double f_ms, double b_ms, pt::group_policy groups) {
  return run_program(std::string(name) + (v > 1 ? " v=" + std::to_string(v) : ""),
                     pt::make_schedule(name, p, m, v, {pt::costs{.f = f_ms, .b = b_ms}, 0}), steps, f_ms, b_ms, groups);
}

/// --lengths: both packings of the step under 1F1B, ZB-H1 and zb-auto, measured and simulated.
int run_lengths(const std::string& file, int cap, double tau, int p, int steps, double f, double b,
                pt::group_policy groups) {
  std::string why;  // (read as the explorer reads it: one length per line, # comments, each in [1, cap])
  const std::optional<std::vector<int>> read = examples::read_lengths(file, cap, why);
  if (!read) {
    std::fprintf(stderr, "bench_faithfulness: --lengths %s\n", why.c_str());
    return 2;
  }
  const std::vector<int>& lengths = *read;
  std::printf(
      "%zu sequences of %s packed under %d tokens, t + t²/%g each; stages sleep F = %.1f ms, B = %.1f ms for "
      "one sequence of %d tokens; %d ranks; groups %s; median of %d steps\n\n",
      lengths.size(), file.c_str(), cap, tau, f, b, cap, p,
      groups == pt::group_policy::per_peer   ? "per peer"
      : groups == pt::group_policy::per_tick ? "per tick"
                                             : "automatic",
      steps);
  std::printf("%-10s %-9s %4s %12s %14s %8s\n", "schedule", "packing", "m", "measured ms", "simulated ms", "ratio");
  for (const char* s : {"1f1b", "zb-h1", "zb-auto"}) {
    pt::schedule_params params;
    params.cost = {.f = f, .b = b};
    const pt::balance_result r = pt::balance(lengths, cap, pt::length_cost{tau}, s, p, 1, params);
    const row a = run_program(s, r.arrival.prog, steps, f, b, groups, &r.arrival.pack.scale);
    const row z = run_program(s, r.balanced.prog, steps, f, b, groups, &r.balanced.pack.scale);
    std::printf("%-10s %-9s %4d %12.2f %14.2f %8.3f\n", s, "arrival", r.arrival.pack.size(), a.measured_ms,
                a.simulated_ms, a.measured_ms / a.simulated_ms);
    std::printf("%-10s %-9s %4d %12.2f %14.2f %8.3f   balanced / arrival: measured %.3f, simulated %.3f\n", s,
                "balanced", r.balanced.pack.size(), z.measured_ms, z.simulated_ms, z.measured_ms / z.simulated_ms,
                z.measured_ms / a.measured_ms, z.simulated_ms / a.simulated_ms);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int p = 4, m = 8, steps = 7, cap = 0;
  double f = 2, b = 4, tau = -1;
  std::string lengths;
  pt::group_policy groups = pt::group_policy::automatic;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    const double x = std::atof(argv[i + 1]);
    if (k == "--lengths")
      lengths = v;
    else if (k == "--groups")
      groups = v == "peer" ? pt::group_policy::per_peer : v == "tick" ? pt::group_policy::per_tick : groups;
    else if (k == "--token-cap")
      cap = static_cast<int>(x);
    else if (k == "--attention-at")
      tau = x;
    else if (k == "--ranks")
      p = static_cast<int>(x);
    else if (k == "--microbatches")
      m = static_cast<int>(x);
    else if (k == "--steps")
      steps = static_cast<int>(x);
    else if (k == "--f")
      f = x;
    else if (k == "--b")
      b = x;
  }
  if (!lengths.empty()) try {
      return run_lengths(lengths, cap, tau >= 0 ? tau : cap, p, steps, f, b, groups);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_faithfulness: %s\n", e.what());
      return 2;
    }
  std::printf("stages sleep F = %.1f ms, B = %.1f ms; %d ranks, %d microbatches; median of %d steps\n\n", f, b, p, m,
              steps);
  std::printf(
      "default groups (automatic); the last three columns: what it resolves to, and the ratio with\n"
      "one group per tick and with one group per peer\n\n");
  std::printf("%-22s %12s %14s %8s   %-4s %8s %8s\n", "schedule", "measured ms", "simulated ms", "ratio", "as", "tick",
              "peer");
  for (const pt::schedule_info& s : pt::schedule_infos) {
    if (pt::schedule_error(s.name, p, m, 0)) continue;
    const std::string name(s.name);
    const int v = pt::default_chunks(s);
    const row r = run(name.c_str(), p, m, v, steps, f, b, pt::group_policy::automatic);
    const row t = run(name.c_str(), p, m, v, steps, f, b, pt::group_policy::per_tick);
    const row q = run(name.c_str(), p, m, v, steps, f, b, pt::group_policy::per_peer);
    std::printf(
        "%-22s %12.2f %14.2f %8.3f   %-4s %8.3f %8.3f\n", r.name.c_str(), r.measured_ms, r.simulated_ms,
        r.measured_ms / r.simulated_ms,
        pt::resolve(pt::group_policy::automatic, pt::make_schedule(name, p, m, v).view()) == pt::group_policy::per_peer
            ? "peer"
            : "tick",
        t.measured_ms / t.simulated_ms, q.measured_ms / q.simulated_ms);
  }
}
