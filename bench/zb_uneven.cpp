// zb_uneven — what searching with the real costs gains when microbatches or ranks are uneven.
//
// Microbatch lengths are drawn from a long-tailed distribution (log-normal, σ = 0.75, scaled to a
// mean of 1: most microbatches short, a few several times longer, as variable sequence lengths
// make them; WLB-LLM, Wang et al. 2025, studies such imbalance) and, in a second table, ranks
// run at speeds drawn from [0.7, 1] (heterogeneous devices). For each (p, m, memory limit) and
// 10 draws it simulates, under those costs:
//   best fixed   the shortest of 1F1B, GPipe, ZB-H1, ZB-H2 that fits the limit;
//   zb-auto      searched for uniform costs (blind to the draw), then run on the real ones;
//   zb-auto+     searched with the real per-microbatch or per-rank costs;
// and prints the mean rank span of each and the mean and largest gain of zb-auto+.
// Costs F = I = W = 1 per microbatch of mean length, latency 0.1. Run: bash bench/zb_uneven.sh
#include <pipetype/pipetype.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace pt = pipetype;

namespace {

struct rng {  // splitmix64
  std::uint64_t s;
  double uniform() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  }
  double normal() {  // Box-Muller
    const double u = 1 - uniform(), v = uniform();
    return std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
};

std::vector<double> long_tailed(rng& g, int m) {
  std::vector<double> x(static_cast<std::size_t>(m));
  double sum = 0;
  for (double& v : x) sum += v = std::exp(0.75 * g.normal());
  for (double& v : x) v *= m / sum;
  return x;
}

std::vector<double> speeds(rng& g, int p) {
  std::vector<double> x(static_cast<std::size_t>(p));
  for (double& v : x) v = 0.7 + 0.3 * g.uniform();
  return x;
}

struct row {
  double fixed = 0, blind = 0, aware = 0, gain_sum = 0, gain_max = 0, gain_blind = 0;
  int n = 0;
};

void one(row& out, int p, int m, double limit, const pt::cost_model& real) {
  const pt::costs base{.f = 1, .b = 2, .i = 1, .w = 1, .comm = 0.1};
  const pt::plan_options opt{.mem_limit_units = static_cast<int>(2 * limit)};
  double fixed = 1e300;
  for (const pt::program& h :
       {pt::make_one_f_one_b(p, m), pt::make_gpipe(p, m), pt::make_zb_h1(p, m), pt::make_zb_h2(p, m)})
    if (pt::build_plan(h, opt).ok()) fixed = std::min(fixed, pt::simulate(h.view(), real).max_rank_span());
  pt::zb_problem pr;
  pr.ranks = p;
  pr.microbatches = m;
  pr.mem_limit = limit;
  pr.costs = pt::cost_model{base};
  const double blind = pt::simulate(pt::make_zb_auto(pr).view(), real).max_rank_span();
  pr.costs = real;
  const double aware = pt::zb_auto_search(pr).rank_span;
  out.fixed += fixed, out.blind += blind, out.aware += aware, ++out.n;
  out.gain_sum += 1 - aware / fixed;
  out.gain_max = std::max(out.gain_max, 1 - aware / fixed);
  out.gain_blind += 1 - aware / blind;
}

void table(const char* title, bool by_rank) {
  std::printf("\n%s (10 draws each; mean rank spans)\n", title);
  std::printf("%2s %3s %5s | %10s | %10s | %10s | %14s %9s | %14s\n", "p", "m", "limit", "best fixed", "zb-auto",
              "zb-auto+", "gain vs fixed", "(largest)", "gain vs blind");
  for (int p : {4, 8})
    for (int m : {2 * p, 4 * p})
      for (double limit : {static_cast<double>(p), 2.0 * p}) {
        row r;
        for (std::uint64_t seed = 1; seed <= 10; ++seed) {
          rng g{seed * 1000 + static_cast<std::uint64_t>(p * 100 + m)};
          const pt::costs base{.f = 1, .b = 2, .i = 1, .w = 1, .comm = 0.1};
          const pt::cost_model real = by_rank ? pt::scaled_costs(base, pt::looped_placement(p, 1), speeds(g, p), {})
                                              : pt::scaled_costs(base, {}, {}, long_tailed(g, m));
          one(r, p, m, limit, real);
        }
        const double n = r.n;
        std::printf("%2d %3d %5g | %10.3f | %10.3f | %10.3f | %13.1f%% %8.1f%% | %13.1f%%\n", p, m, limit, r.fixed / n,
                    r.blind / n, r.aware / n, 100 * r.gain_sum / n, 100 * r.gain_max, 100 * r.gain_blind / n);
      }
}

}  // namespace

int main() {
  table("Long-tailed microbatch lengths (log-normal, sigma 0.75, mean 1)", false);
  table("Rank speeds drawn from [0.7, 1]", true);
  return 0;
}
