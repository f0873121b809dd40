#include "sweep.hpp"

#include <cmath>
#include <fstream>
#include <random>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_balance {

namespace pt = pipetype;

// every sequence once, in arrival order within a microbatch, no microbatch over the cap, and the
// tokens and scales the lengths give
void check_packing(const pt::packing& p, const std::vector<int>& lengths, int cap, const pt::length_cost& cost) {
  std::vector<int> seen(lengths.size(), 0);
  REQUIRE(p.tokens.size() == p.microbatches.size());
  REQUIRE(p.scale.size() == p.microbatches.size());
  for (std::size_t j = 0; j < p.microbatches.size(); ++j) {
    CHECK(!p.microbatches[j].empty());
    CHECK(std::is_sorted(p.microbatches[j].begin(), p.microbatches[j].end()));
    long long tokens = 0;
    double c = 0;
    for (const int i : p.microbatches[j]) {
      ++seen[static_cast<std::size_t>(i)];
      tokens += lengths[static_cast<std::size_t>(i)];
      c += cost.of(lengths[static_cast<std::size_t>(i)]);
    }
    CHECK(tokens <= cap);
    CHECK(p.tokens[j] == tokens);
    CHECK(p.scale[j] == doctest::Approx(c / cost.of(cap)));
  }
  for (const int n : seen) CHECK(n == 1);
}

std::vector<int> lognormal(std::uint64_t seed, int n, double median, double sigma, int cap) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> z(std::log(median), sigma);
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(std::clamp(static_cast<int>(std::lround(std::exp(z(g)))), 1, cap));
  return out;
}

TEST_CASE("balance: arrival order fills each microbatch while the cap allows") {
  const std::vector<int> lengths{3, 3, 3, 5, 2};
  const pt::packing p = pt::pack_in_order(lengths, 6);
  CHECK(p.microbatches == std::vector<std::vector<int>>{{0, 1}, {2}, {3}, {4}});
  CHECK(p.tokens == std::vector<std::int64_t>{6, 3, 5, 2});
  check_packing(p, lengths, 6, {});
}

TEST_CASE("balance: the longest-first rule fills the lightest microbatch with room, and prices t + t²/τ") {
  const std::vector<int> lengths{1, 5, 3, 2, 3, 4};
  const pt::packing p = pt::pack_balanced(lengths, 6);  // 18 tokens: 3 microbatches of 6
  CHECK(p.microbatches == std::vector<std::vector<int>>{{0, 1}, {3, 5}, {2, 4}});
  CHECK(p.tokens == std::vector<std::int64_t>{6, 6, 6});
  check_packing(p, lengths, 6, {});
  // the quadratic part: one sequence of 6 costs 6 + 36/2 = 24 units, a full one; 5 + 1 cost 26/24
  const pt::length_cost quad{2};
  CHECK(quad.of(6) == 24);
  const pt::packing q = pt::pack_balanced(lengths, 6, quad);
  check_packing(q, lengths, 6, quad);
  CHECK(q.scale[0] == doctest::Approx((5 + 12.5 + 1 + 0.5) / 24.0));
  // a sequence that fits no microbatch opens another
  const pt::packing r = pt::pack_balanced({4, 4, 4}, 6);
  CHECK(r.size() == 3);
  // at least as many as asked
  CHECK(pt::pack_balanced(lengths, 6, {}, 5).size() == 5);
}

TEST_CASE("balance: random long-tailed steps pack every sequence once, and balancing never lengthens the step") {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const int cap = 4096;
    const std::vector<int> lengths = lognormal(seed, 40 + static_cast<int>(seed) * 17, 300, 1.2, cap);
    for (const double tau : {0.0, 1024.0}) {
      const pt::length_cost cost{tau};
      check_packing(pt::pack_in_order(lengths, cap, cost), lengths, cap, cost);
      check_packing(pt::pack_balanced(lengths, cap, cost), lengths, cap, cost);
      for (const char* s : {"1f1b", "zb-h1", "gpipe"}) {
        CAPTURE(seed);
        CAPTURE(tau);
        CAPTURE(s);
        pt::schedule_params params;
        params.cost = {.f = 1, .b = 2};
        const pt::balance_result r = pt::balance(lengths, cap, cost, s, 4, 1, params);
        check_packing(r.arrival.pack, lengths, cap, cost);
        check_packing(r.balanced.pack, lengths, cap, cost);
        CHECK(r.balanced.makespan <= r.arrival.makespan);
        CHECK(r.ratio() <= 1.0);
        CHECK(pt::build_plan(r.balanced.prog).ok());
        CHECK(r.balanced.prog.microbatches == r.balanced.pack.size());
        // the same input, the same answer
        const pt::balance_result again = pt::balance(lengths, cap, cost, s, 4, 1, params);
        CHECK(again.balanced.pack.microbatches == r.balanced.pack.microbatches);
        CHECK(again.balanced.makespan == r.balanced.makespan);
      }
    }
  }
}

TEST_CASE(
    "balance: on the long-tailed step of the data file, 1F1B's balanced step is at most 0.85 of arrival order's") {
  std::ifstream in(std::string(PIPETYPE_TEST_DATA) + "/../../examples/data/lengths_lognormal.txt");
  std::vector<int> lengths;
  for (int t = 0; in >> t;) lengths.push_back(t);
  REQUIRE(lengths.size() == 256);
  std::vector<int> sorted = lengths;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted.back() >= 8 * sorted[sorted.size() / 2]);  // max / median ≥ 8
  pt::schedule_params params;
  params.cost = {.f = 1, .b = 2};
  for (const int p : {4, 8}) {
    CAPTURE(p);
    const pt::balance_result r = pt::balance(lengths, 8192, pt::length_cost{2048}, "1f1b", p, 1, params);
    MESSAGE("1f1b p=" << p << ": arrival " << r.arrival.makespan << ", balanced " << r.balanced.makespan << " ("
                      << r.ratio() << ", " << (r.from_arrival ? "arrival packing" : "the rule's") << ", "
                      << std::string(r.order) << ")");
    CHECK(r.ratio() <= 0.85);
  }
}

TEST_CASE("balance: the cost model fitted to measured times finds the linear and the quadratic part") {
  // times made by a = 2, b = 0.01 (τ = 200) over microbatches of one to three sequences
  const std::vector<std::vector<int>> mbs{{10}, {50, 20}, {100}, {300, 5}, {7, 7, 7}, {250}};
  std::vector<double> times;
  for (const std::vector<int>& ls : mbs) {
    double t = 0;
    for (const int x : ls) t += 2.0 * x + 0.01 * x * x;
    times.push_back(t);
  }
  const pt::length_fit f = pt::fit_length_cost(mbs, times);
  CHECK(f.a == doctest::Approx(2));
  CHECK(f.b == doctest::Approx(0.01));
  CHECK(f.cost.quadratic_at == doctest::Approx(200));
  CHECK(f.samples == 6);
  // purely linear times: b would be 0 or below, the fit is linear (τ 0)
  std::vector<double> linear;
  for (const std::vector<int>& ls : mbs) {
    double t = 0;
    for (const int x : ls) t += 3.0 * x;
    linear.push_back(t);
  }
  const pt::length_fit g = pt::fit_length_cost(mbs, linear);
  CHECK(g.b == 0);
  CHECK(g.a == doctest::Approx(3));
  CHECK(g.cost.quadratic_at == 0);
  CHECK_THROWS_AS(pt::fit_length_cost(mbs, {1.0}), std::invalid_argument);
  CHECK_THROWS_AS(pt::fit_length_cost({}, {}), std::invalid_argument);
  std::vector<double> bad = times;
  bad[2] = std::nan("");
  CHECK_THROWS_AS(pt::fit_length_cost(mbs, bad), std::invalid_argument);
}

TEST_CASE("balance: bad lengths, caps and prices are one sentence") {
  CHECK_THROWS_WITH_AS(pt::pack_in_order({}, 8), "no sequences to pack", std::invalid_argument);
  CHECK_THROWS_WITH_AS(pt::pack_in_order({3, 0}, 8), "sequence 2 has length 0, below 1", std::invalid_argument);
  CHECK_THROWS_WITH_AS(pt::pack_balanced({3, 9}, 8), "sequence 2 has length 9, above the token cap 8",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(pt::pack_in_order({3}, 0), "the token cap must be at least 1, got 0", std::invalid_argument);
  CHECK_THROWS_AS(pt::pack_in_order({3}, 8, pt::length_cost{-1}), std::invalid_argument);
  CHECK_THROWS_AS(pt::pack_in_order({3}, 8, pt::length_cost{std::nan("")}), std::invalid_argument);
  pt::schedule_params params;
  CHECK_THROWS_WITH_AS(pt::balance({4, 4, 4}, 4, {}, "dualpipe", 4, 1, params),
                       doctest::Contains("the arrival order packs 3 microbatches, which dualpipe cannot run"),
                       std::invalid_argument);
}

}  // namespace test_balance
}  // namespace
