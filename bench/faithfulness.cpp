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
//
// Sleeping is done to an absolute deadline with the thread's timer slack lowered (Linux), so
// each action's length is its cost plus the kernel's wake-up latency (tens of microseconds).
#include <pipetype/host.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

namespace pt = pipetype;
namespace ph = pipetype::host;

namespace {

struct sleeper {
  using input = pt::tensor<float, 64>;
  using output = pt::tensor<float, 64>;
  using weight_grad = pt::tensor<float, 1>;  // DualPipe needs pipetype to add gradients
  std::chrono::microseconds f{2000}, b{4000};
  float grad[1] = {0};
  static void hold(std::chrono::microseconds d) {
#if defined(__linux__)
    thread_local const bool slack = [] { return prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0) == 0; }();
    (void)slack;
#endif
    std::this_thread::sleep_until(std::chrono::steady_clock::now() + d);
  }
  void forward(const pt::forward_ctx<sleeper>&) { hold(f); }
  void backward(const pt::backward_ctx<sleeper>&) { hold(b); }
  void backward_input(const pt::backward_ctx<sleeper>&) { hold(b / 2); }
  void backward_weight(const pt::backward_ctx<sleeper>&) { hold(b / 2); }
  std::span<float> weight_gradients() { return grad; }
};

struct row {
  std::string name;
  double measured_ms, simulated_ms;
};

row run(const char* name, int p, int m, int v, int steps, double f_ms, double b_ms, pt::group_policy groups) {
  const pt::runtime_plan plan =
      pt::build_plan(pt::make_schedule(name, p, m, v, {pt::costs{.f = f_ms, .b = b_ms}, 0}), {.groups = groups});
  if (!plan.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, pt::describe(plan.result).c_str());
    std::exit(2);
  }
  std::vector<sleeper> stages(static_cast<std::size_t>(plan.compute().lane_length()));
  for (sleeper& s : stages) {
    s.f = std::chrono::microseconds(static_cast<long>(f_ms * 1000));
    s.b = std::chrono::microseconds(static_cast<long>(b_ms * 1000));
  }
  pt::uniform_chain<sleeper> model(std::move(stages));
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
  const double sim = pt::simulate(plan, pt::costs{.f = f_ms, .b = b_ms}).makespan();
  return {std::string(name) + (v > 1 ? " v=" + std::to_string(v) : ""), ms[ms.size() / 2], sim};
}

}  // namespace

int main(int argc, char** argv) {
  int p = 4, m = 8, steps = 7;
  double f = 2, b = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const double x = std::atof(argv[i + 1]);
    if (k == "--ranks")
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
