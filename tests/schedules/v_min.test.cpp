#include "sweep.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_v_min {

namespace pt = pipetype;

constexpr auto plan = pt::make_plan<pt::v_min<pt::ranks<4>, pt::microbatches<8>>>();
static_assert(plan.stages == 8 && plan.stage_rank[0] == 0 && plan.stage_rank[7] == 0 && plan.stage_rank[4] == 3);
static_assert(plan.peak_activations(0) == 4);  // 2⌊(p + 4)/3⌋ = 4 chunk activations = 2 shares

// The paper's memory: an activation is held from its F until its W (the I frees nothing).
constexpr pt::memory_model held_until_w{.f = 2, .b = -2, .i = 0, .w = -2, .unit = 2};

/// The largest peak over ranks in shares of a rank's layers (one microbatch of both chunks = 1).
double max_share_peak(const pt::program& prog, const pt::memory_model& mem) {
  const pt::program_facts f = pt::check_program(prog.view(), {.memory = mem});
  int units = 0;
  for (int u : f.peak_units) units = std::max(units, u);
  return units / (2.0 * mem.unit);
}

/// Rank span − per-rank work, F = I = W = 1 per chunk (the same layers as 1F1B at F = 2, B = 4).
double v_bubble(const pt::program& prog) {
  return pt::simulate(prog.view(), pt::costs{.f = 1, .b = 2}).max_rank_span() - 6.0 * prog.microbatches;
}

TEST_CASE("v_min: verifies at every size, peak (p + 4)/3 shares for m >= 2p") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 4 * p + 2; ++m) {
      CAPTURE(p);
      CAPTURE(m);
      const pt::program prog = pt::make_v_min(p, m);
      REQUIRE(pt::build_plan(prog).ok());
      REQUIRE(pt::build_plan(prog, {.comms = pt::comm_policy::per_rank_pair}).ok());
      const int closed = (p + 4) / 3;
      CHECK(max_share_peak(prog, held_until_w) <= closed);
      if (m >= 2 * p) {
        CHECK(max_share_peak(prog, held_until_w) == closed);
        // pipetype's default (I frees half, W the rest): the same, but at p = 2 only 1.5
        CHECK(max_share_peak(prog, {}) == (p == 2 ? 1.5 : closed));
      }
    }
}

TEST_CASE("v_min: bubble two thirds of 1F1B's, less the squeezed ends, for m >= 2p") {
  // measured under F = I = W = 1; equal to what the authors' builder reports for its own order
  const double want[] = {0, 0, 3, 5, 11, 15, 17, 23, 27};
  for (int p = 2; p <= 8; ++p)
    for (int m : {2 * p, 3 * p, 4 * p + 1}) {
      CAPTURE(p);
      CAPTURE(m);
      const double bubble = v_bubble(pt::make_v_min(p, m));
      const pt::program ofob = pt::make_one_f_one_b(p, m);
      const double ofob_bubble =
          pt::simulate(ofob.view(), pt::costs{.f = 2, .b = 4}).max_rank_span() - 6.0 * m;  // 6(p − 1)
      CHECK(ofob_bubble == 6.0 * (p - 1));
      CHECK(bubble == want[p]);
      // the block's 2/3 of 1F1B's, of which squeezing the warm-up and cool-down wins back 1 to 3
      CHECK(bubble <= 2.0 / 3.0 * ofob_bubble - 1);
      CHECK(bubble >= 2.0 / 3.0 * ofob_bubble - 3);
      CHECK(bubble > v_bubble(pt::make_zb_v(p, m)));  // ZB-V: zero bubble at p shares
    }
}

TEST_CASE("v_min: the V placement and the building block's first slots") {
  const pt::program prog = pt::make_v_min(3, 6);
  CHECK(prog.stage_rank == std::vector<int>{0, 1, 2, 2, 1, 0});
  const auto r2 = prog.view().rank_actions(2);
  CHECK(r2[0] == pt::F(2, 0));  // the last rank turns microbatch 0 at once: F(chunk 0), F(chunk 1)
  CHECK(r2[1] == pt::F(3, 0));
  CHECK(pt::make_schedule("v-min", 3, 6).actions == prog.actions);
  CHECK(pt::schedule_error("v-min", 3, 6, 1) != nullptr);  // two stages per rank
}

}  // namespace test_v_min
}  // namespace
