#include <pipetype/schedules/registry.hpp>

#include <doctest/doctest.h>

#include <string>

namespace pt = pipetype;

TEST_CASE("registry: every name builds the same program as its generator") {
  CHECK(pt::make_schedule("gpipe", 3, 4).actions == pt::make_gpipe(3, 4).actions);
  CHECK(pt::make_schedule("1f1b", 3, 4).actions == pt::make_one_f_one_b(3, 4).actions);
  CHECK(pt::make_schedule("interleaved-1f1b", 2, 4, 2).actions == pt::make_interleaved_1f1b(2, 4, 2).actions);
  CHECK(pt::make_schedule("looped-bfs", 2, 4, 3).actions == pt::make_looped_bfs(2, 4, 3).actions);
  CHECK(pt::make_schedule("zb-h1", 3, 4).actions == pt::make_zb_h1(3, 4).actions);
  CHECK(pt::make_schedule("zb-h2", 3, 4).actions == pt::make_zb_h2(3, 4).actions);
  CHECK(pt::make_schedule("zb-v", 3, 4).actions == pt::make_zb_v(3, 4).actions);
  CHECK(pt::make_schedule("dualpipe-v", 2, 4).actions == pt::make_dualpipe_v(2, 4).actions);
  pt::zb_problem pr;
  pr.ranks = 3;
  pr.microbatches = 6;
  pr.costs = pt::cost_model{pt::costs{.f = 1, .b = 3}};
  pr.mem_limit = 3;
  CHECK(pt::make_schedule("zb-auto", 3, 6, 0, {pt::costs{.f = 1, .b = 3}, 3}).actions == pt::make_zb_auto(pr).actions);
}

TEST_CASE("registry: v = 0 asks for the schedule's own stages per rank") {
  CHECK(pt::make_schedule("interleaved-1f1b", 2, 4).stages == 4);
  CHECK(pt::make_schedule("zb-v", 2, 4).stages == 4);
  CHECK(pt::make_schedule("1f1b", 2, 4).stages == 2);
  for (const pt::schedule_info& s : pt::schedule_infos) CHECK(pt::default_chunks(s) == (s.chunks ? s.chunks : 2));
}

TEST_CASE("registry: bad requests are named, not built") {
  CHECK(std::string(pt::schedule_error("zigzag", 2, 2, 1)).find("unknown schedule") == 0);
  CHECK(std::string(pt::schedule_error("1f1b", 2, 2, 2)).find("--chunks must be 1") != std::string::npos);
  CHECK(std::string(pt::schedule_error("zb-v", 2, 2, 3)).find("--chunks must be 2") != std::string::npos);
  CHECK(std::string(pt::schedule_error("dualpipe-v", 4, 7, 2)).find("at least 2 x ranks") != std::string::npos);
  CHECK(pt::schedule_error("dualpipe-v", 4, 8, 2) == nullptr);
  CHECK(pt::schedule_error("1f1b", 0, 2, 1) != nullptr);
  CHECK(pt::schedule_error("gpipe", 2, 0, 1) != nullptr);
  CHECK(pt::schedule_error("looped-bfs", 2, 2, -1) != nullptr);
  CHECK(pt::schedule_error("interleaved-1f1b", 3, 7, 2) != nullptr);
  CHECK_THROWS_AS(pt::make_schedule("interleaved-1f1b", 3, 7, 2), std::invalid_argument);
  CHECK_THROWS_AS(pt::make_schedule("zb-auto", 2, 4, 1, {{}, 0.5}), std::invalid_argument);
  for (const pt::schedule_info& s : pt::schedule_infos) CHECK(pt::find_schedule(s.name) == &s);
}
