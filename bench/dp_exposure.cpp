// Not a Google Benchmark: prints the modelled data-parallel time each schedule leaves exposed
// (mesh/simulate.hpp's exposed_dp) on a pp × dp = 4 × 2 mesh, for docs/12_data_parallel.md.
//
//   ./build/release/bench/bench_dp_exposure
//
// The model: a rank's share of the model costs F = 1 and B = 2 per microbatch (split over its
// chunks: interleaved and looped BFS run 2 stages a rank, each F = 0.5, B = 1) and holds
// parameters whose all-reduce over 2 replicas takes `ar` time units (bytes / bus bandwidth ×
// 2(n−1)/n = 1 at n = 2): `ar` = 2 (a fast link) or 8 (a slow one), split over its chunks as well.
// With FSDP a stage's parameters are gathered before use (all-gather, half an all-reduce's time)
// and its gradients reduce-scattered (the same), as PyTorch's pass places them: a window of 3
// stages unsharded at once (PyTorch's default), or of 1 (the least memory: a stage is gathered
// again whenever the rank comes back to it). With buckets (dp_options::buckets = 4), each
// reduction runs as 4 all-reduces of a quarter of the bytes, bucket b ready once (b + 1)/4 of the
// stage's last backward has run. A second table: 1F1B at AR = 8 over bucket counts, each
// all-reduce also paying a latency α, where more buckets stop paying.
// Pipeline transfers cost nothing, so the table isolates the collectives.
#include <pipetype/mesh/simulate.hpp>
#include <pipetype/pipetype.hpp>

#include <cstdio>
#include <string>

namespace pt = pipetype;

int main() {
  const int p = 4, dp = 2;
  std::printf(
      "| schedule | m | step without DP | AR = 2 | AR = 8 | 4 buckets, AR = 2 | 4 buckets, AR = 8 | FSDP, AR = 2 | "
      "FSDP, AR = 8 | FSDP window 1, AR = 2 | FSDP window 1, AR = 8 |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const char* name : {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1"})
    for (const int m : {p, 4 * p}) {
      const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, p, m));
      if (!plan.ok()) {
        std::fprintf(stderr, "%s m=%d: %s\n", name, m, pt::describe(plan.result).c_str());
        return 1;
      }
      const pt::program_view prog = plan.compute();
      const double v = static_cast<double>(prog.stages) / p;  // chunks a rank
      const pt::costs c{.f = 1 / v, .b = 2 / v};
      const double base = pt::simulate_mesh(pt::lower_mesh(prog, plan.lowered(), {.pp = p, .dp = dp},
                                                           pt::place_collectives(prog, {}), {.dp = dp}),
                                            c, {})
                              .makespan;
      std::printf("| %s | %d | %.1f", name, m, base);
      for (const int fsdp : {0, -4, 3, 1})  // 0: no sharding; −4: 4 buckets; else the window
        for (const double ar : {2.0, 8.0}) {
          const pt::dp_options o{
              .dp = dp, .shard = fsdp > 0, .window = fsdp > 0 ? fsdp : 3, .buckets = fsdp < 0 ? -fsdp : 1};
          const pt::mesh_costs d{.param_bytes = {ar / v}, .bandwidth = 1};
          const double e =
              pt::exposed_dp(prog, plan.lowered(), {.pp = p, .dp = dp}, pt::place_collectives(prog, o), o, c, d);
          std::printf(" | %.2f", e);
        }
      std::printf(" |\n");
    }
  // buckets against their latency: 1F1B, m = 16, AR = 8
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", p, 4 * p));
  const pt::program_view prog = plan.compute();
  const pt::costs c{.f = 1, .b = 2};
  std::printf("\n| buckets | α = 0 | α = 0.05 | α = 0.2 |\n|---|---|---|---|\n");
  for (const int n : {1, 2, 4, 8, 16, 32}) {
    std::printf("| %d", n);
    for (const double alpha : {0.0, 0.05, 0.2}) {
      const pt::dp_options o{.dp = dp, .buckets = n};
      const pt::mesh_costs d{.param_bytes = {8}, .bandwidth = 1, .alpha = alpha};
      std::printf(" | %.2f",
                  pt::exposed_dp(prog, plan.lowered(), {.pp = p, .dp = dp}, pt::place_collectives(prog, o), o, c, d));
    }
    std::printf(" |\n");
  }
  return 0;
}
